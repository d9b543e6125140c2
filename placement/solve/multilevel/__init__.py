"""Multilevel candidates: Mt-KaHyPar process mapping of a job's rank units onto the hosts of a
candidate domain (mapping), from the traffic hypergraph and the tree of candidate domains (graph)."""
