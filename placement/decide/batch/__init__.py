"""A queue of jobs placed jointly on one state: the joint search, admission (a CP-SAT knapsack),
improvement moves, and the outcomes per job with the joint validator."""
