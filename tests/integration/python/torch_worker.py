"""A PyTorch worker for integration.python.torch: init_process_group through
troupe.torch (gloo; the rendezvous over the head's store, no MASTER_PORT),
an all_reduce and an all_gather checked by value, then a store wait and a get
that run out. Prints "pt: ..." lines the test greps."""
import datetime
import os
import sys

import torch
import torch.distributed as dist

import troupe
import troupe.torch

# troupe-node sets MASTER_ADDR/MASTER_PORT for torchrun-style programs; without
# them an env:// rendezvous (TCPStore) could not even start, so the group below
# can only have met through troupe's store.
os.environ.pop("MASTER_ADDR", None)
os.environ.pop("MASTER_PORT", None)
store = troupe.torch.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
print(f"pt: rank {rank}/{size} backend {dist.get_backend()} store {type(store).__name__} torch {torch.__version__}",
      flush=True)
t = torch.full((4,), float(rank + 1))
dist.all_reduce(t)
want = float(size * (size + 1) // 2)
print(f"pt: rank {rank} all_reduce = {t.tolist()} {'ok' if t.tolist() == [want] * 4 else 'WRONG'}", flush=True)
parts = [torch.zeros(2) for _ in range(size)]
dist.all_gather(parts, torch.tensor([float(rank), float(rank * 10)]))
got = [p.tolist() for p in parts]
print(f"pt: rank {rank} all_gather = {got} {'ok' if got == [[r, r * 10] for r in range(size)] else 'WRONG'}",
      flush=True)
if rank == 0:
    try:
        store.wait(["never-set-key"], datetime.timedelta(seconds=1))
        print("pt: wait returned", flush=True)
    except RuntimeError as e:
        print(f"pt: wait raised RuntimeError: {e}", flush=True)
    store.set_timeout(datetime.timedelta(seconds=1))
    try:
        store.get("never-set-either")
        print("pt: get returned", flush=True)
    except RuntimeError as e:
        print(f"pt: get raised RuntimeError: {e}", flush=True)
    print(f"pt: num_keys {store.num_keys()} check {store.check(['never-set-key'])}", flush=True)
dist.barrier()
dist.destroy_process_group()
store.close()
print(f"pt: rank {rank} done", flush=True)
sys.exit(0)
