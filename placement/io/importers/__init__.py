"""Importers: the formats users have (nvidia-smi topo, Slurm, Kubernetes, NCCL XML, rocm-smi,
ibnetdiscover, topograph, device graphs) into native cluster documents."""
