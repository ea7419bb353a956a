"""The RL pattern with PyTorch under troupe: a policy group trains, a
generation group takes the policy's weights every N steps and reports its
validation loss on them.

- policy: DistributedDataParallel over the group's own process group
  (troupe.torch.init_process_group: gloo on CPU, NCCL on GPUs), each step a
  troupe.torch.step with its loss, so metrics, health and profiling work.
- generation: builds the same model from another seed and never trains; it
  stands where an inference engine would generate rollouts.
- refit: a communicator the job declares across both groups (`communicators:
  [{name: refit, groups: [policy, generation]}]`, ranks: the policy's, then
  the generation's). troupe.torch.new_process_group("refit") makes a process
  group of it beside the default one; every --refit-every steps and at the
  end, policy rank 0 broadcasts every parameter over it. Each generation rank
  then computes the validation loss, reports it (`troupe metrics`: val_loss,
  refit_ms, refit_bytes) and the first generation rank broadcasts it back,
  so policy rank 0 prints both losses: they are equal, it is the same model.

    python3 rl.py [--steps 40] [--refit-every 10] [--global-batch 64] [--lr 0.05]
"""
import argparse
import hashlib
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import troupe
import troupe.torch

N, D, VAL = 8192, 32, 1024  # samples, features, held out for validation


def data():
    """The same synthetic regression task on every rank (a fixed seed)."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(N, D, generator=g)
    y = torch.tanh(x @ torch.randn(D, 1, generator=g)) + 0.01 * torch.randn(N, 1, generator=g)
    return x[:-VAL], y[:-VAL], x[-VAL:], y[-VAL:]


def model(seed: int, dev: torch.device) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(D, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(dev)


def digest(m: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for p in m.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def refit(pg, m: torch.nn.Module, root: int, dev: torch.device) -> int:
    """Broadcast every parameter from refit rank root; the bytes moved."""
    opts = dist.BroadcastOptions()
    opts.rootRank, opts.rootTensor = root, 0
    total = 0
    with torch.no_grad():
        for p in m.parameters():
            buf = p.detach().contiguous()
            pg.broadcast([buf], opts).wait()
            if buf.data_ptr() != p.data_ptr():
                p.copy_(buf)
            total += buf.numel() * buf.element_size()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return total


def share(pg, value: float, root: int, dev: torch.device) -> float:
    """value from refit rank root on every rank."""
    t = torch.tensor([value], dtype=torch.float64, device=dev)
    opts = dist.BroadcastOptions()
    opts.rootRank, opts.rootTensor = root, 0
    pg.broadcast([t], opts).wait()
    return float(t.item())


def val_loss(m: torch.nn.Module, xv: torch.Tensor, yv: torch.Tensor) -> float:
    with torch.no_grad():
        return torch.nn.functional.mse_loss(m(xv), yv).item()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--refit-every", type=int, default=10)
    ap.add_argument("--global-batch", type=int, default=64, help="samples per step over the policy's ranks")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--policy", default="policy", help="the name of the training group")
    ap.add_argument("--comm", default="refit", help="the communicator across both groups")
    args = ap.parse_args()

    w = troupe.Worker(caller_profiles=True)
    troupe.torch.init_process_group(worker=w)  # this worker's group: DDP (policy), or nothing else (generation)
    pg, rrank, rsize = troupe.torch.new_process_group(args.comm, worker=w)
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    x, y, xv, yv = data()
    xv, yv = xv.to(dev), yv.to(dev)
    policy = w.group == args.policy
    gen_root = dist.get_world_size() if policy else rrank - dist.get_rank()  # the first generation rank
    refits = sorted(set(list(range(args.refit_every, args.steps + 1, args.refit_every)) + [args.steps]))
    m = model(0 if policy else 1, dev)
    print(f"rl: {w.name} refit rank {rrank}/{rsize} group rank {dist.get_rank()}/{dist.get_world_size()} "
          f"backend {dist.get_backend()} on {dev.type}", flush=True)
    if policy:
        run_policy(args, w, m, dev, x, y, xv, yv, pg, gen_root, refits)
    else:
        run_generation(args, w, m, dev, xv, yv, pg, gen_root, refits)
    dist.destroy_process_group()
    troupe.torch.close()
    w.close()
    return 0


def run_policy(args, w, m, dev, x, y, xv, yv, pg, gen_root, refits) -> None:
    rank, size = dist.get_rank(), dist.get_world_size()
    if args.global_batch % size:
        w.fail(troupe.InvalidArgument, f"--global-batch {args.global_batch} is not a multiple of {size} ranks")
        sys.exit(2)
    ddp = DDP(m, device_ids=[dev.index] if dev.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    per, n = args.global_batch // size, x.shape[0]
    for step in range(1, args.steps + 1):
        lo = ((step - 1) * args.global_batch) % (n - args.global_batch + 1) + rank * per
        xb, yb = x[lo:lo + per].to(dev), y[lo:lo + per].to(dev)
        with troupe.torch.step(step, worker=w) as s:
            loss = torch.nn.functional.mse_loss(ddp(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            s.loss = mean.item() / size
        if step in refits:
            t0 = time.monotonic()
            nbytes = refit(pg, m, 0, dev)
            ms = (time.monotonic() - t0) * 1000
            gen = share(pg, 0.0, gen_root, dev)
            if rank == 0:
                own = val_loss(m, xv, yv)
                w.metric(step, "refit_ms", ms)
                w.metric(step, "refit_bytes", nbytes)
                print(f"rl: policy refit step={step} bytes={nbytes} ms={ms:.1f} params={digest(m)} "
                      f"train_loss={s.figures['loss']:.6f} val_loss={own:.6f} generation_val_loss={gen:.6f}",
                      flush=True)


def run_generation(args, w, m, dev, xv, yv, pg, gen_root, refits) -> None:
    me = w.comm_info(args.comm).rank
    print(f"rl: {w.name} before any refit params={digest(m)} val_loss={val_loss(m, xv, yv):.6f}", flush=True)
    for step in refits:
        t0 = time.monotonic()
        nbytes = refit(pg, m, 0, dev)
        ms = (time.monotonic() - t0) * 1000
        v = val_loss(m, xv, yv)
        w.metric(step, "val_loss", v)
        w.metric(step, "refit_ms", ms)
        share(pg, v, gen_root, dev)
        print(f"rl: generation refit step={step} rank={me} bytes={nbytes} ms={ms:.1f} params={digest(m)} "
              f"val_loss={v:.6f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
