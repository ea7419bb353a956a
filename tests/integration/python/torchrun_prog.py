"""A program written for torchrun, unmodified for troupe (no troupe import),
for integration.python.env_torchrun: prints the variables torchrun sets,
then (with "dist") joins a gloo process group through env:// (a TCPStore on
MASTER_ADDR:MASTER_PORT, as under torchrun) and all-reduces its rank."""
import os
import sys

KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_NAME",
        "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS")
print("trun: env " + " ".join(f"{k}={os.environ.get(k, '-')}" for k in KEYS), flush=True)
if sys.argv[1:] == ["dist"]:
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    print(f"trun: rank {dist.get_rank()}/{dist.get_world_size()} local {os.environ['LOCAL_RANK']} "
          f"node {os.environ['GROUP_RANK']} threads {torch.get_num_threads()} sum {t.item():g}", flush=True)
    dist.destroy_process_group()
