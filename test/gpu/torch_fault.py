#!/usr/bin/env python3
"""PyTorch's failure handling on libmpccl (make check-gpu, part "torch").

Runs unmodified torch.distributed code with libmpccl.so loaded in place of
libnccl.so.2 (LD_PRELOAD) and checks the two promises a trainer relies on:

  skip     2 ranks; rank 1 stays alive but never calls the next allreduce.
           Rank 0 runs with a 10 s process-group timeout and
           TORCH_NCCL_ASYNC_ERROR_HANDLING=1: its watchdog must abort the
           communicator and end the process (an error, never a hang; 77 s
           on PyTorch 2.11 with NCCL 2.28.9 and with mpccl alike).
  torchft  3 ranks; rank 2 is killed (SIGKILL) in the middle of a loop of
           allreduces.  The survivors see the failure, abort the process
           group, build a new one over the two of them and go on stepping:
           every later step's result must be exact.

Usage: torch_fault.py LIBMPCCL [skip|torchft|all]
The driver starts the ranks as subprocesses (ranks share GPUs round-robin:
several processes on one GPU are fine for mpccl) and bounds every wait, so a
hang fails the test instead of blocking it.  Exit 0: pass, 1: fail, 77: skip.
"""
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---------------------------------------------------------------- workers
def worker_skip(rank, world, port):
    import torch
    import torch.distributed as dist
    from datetime import timedelta
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=10), device_id=dev)
    x = torch.ones(1 << 16, device=dev)
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    print(f"[rank {rank}] warm-up done", flush=True)
    if rank == 1:
        time.sleep(60)  # alive, never calls; killed by the driver
        return 0
    dist.all_reduce(x)  # waits for rank 1 forever: the watchdog must act
    torch.cuda.synchronize()
    print(f"[rank {rank}] UNEXPECTED: the allreduce completed", flush=True)
    return 3


def worker_torchft(rank, world, port):
    import torch
    import torch.distributed as dist
    from datetime import timedelta
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=timedelta(seconds=60))

    def make_pg(tag, r, n):
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timedelta(seconds=20)
        return dist.ProcessGroupNCCL(dist.PrefixStore(tag, store), r, n, opts)

    pg = make_pg("g0", rank, world)
    x = torch.empty(4096, device=dev)
    victim, kill_step = world - 1, 5
    step, failed_at = 0, None
    while step < 12:
        if rank == victim and step == kill_step:
            print(f"[rank {rank}] killing myself at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        n = world if failed_at is None else world - 1
        x.fill_(1.0)
        try:
            work = pg.allreduce([x])
            work.wait()
            torch.cuda.synchronize()
        except Exception as e:  # the failure surfaces here
            if failed_at is not None:
                raise
            failed_at = step
            t0 = time.time()
            print(f"[rank {rank}] step {step} failed: {str(e).splitlines()[0][:200]}", flush=True)
            pg.abort()
            pg = make_pg("g1", rank, world - 1)  # survivors keep their ranks 0..n-2
            print(f"[rank {rank}] new process group over the survivors in "
                  f"{time.time() - t0:.2f} s", flush=True)
            continue  # redo the step on the new group
        got = x[0].item()
        if got != n or not torch.all(x == n):
            print(f"[rank {rank}] step {step}: wrong result {got}, expected {n}", flush=True)
            return 4
        step += 1
    if failed_at is None:
        print(f"[rank {rank}] UNEXPECTED: no failure seen", flush=True)
        return 5
    print(f"[rank {rank}] recovered: 12 steps, failure at step {failed_at}", flush=True)
    return 0


# ---------------------------------------------------------------- driver
def run_case(lib, case, world, env_extra, bound_s, expect):
    port = free_port()
    procs = []
    t0 = time.time()
    for r in range(world):
        env = dict(os.environ)
        env.update(env_extra)
        env["LD_PRELOAD"] = lib + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        env.setdefault("NCCL_NVLS_ENABLE", "0")
        procs.append(subprocess.Popen([sys.executable, __file__, "--worker", case, str(r), str(world),
                                       str(port)], env=env))
    ends = [None] * world
    while time.time() - t0 < bound_s and any(e is None for e in ends):
        for r, p in enumerate(procs):
            if ends[r] is None and p.poll() is not None:
                ends[r] = time.time() - t0
        if case == "skip" and ends[0] is not None and procs[1].poll() is None:
            procs[1].kill()  # the idle rank has served its purpose
        time.sleep(0.1)
    hung = [r for r, e in enumerate(ends) if e is None]
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    codes = [p.returncode for p in procs]
    ok = expect(codes, ends, hung)
    print(f"##### torch {case}: exit codes {codes}, ended after "
          f"{['%.1f s' % e if e is not None else 'HUNG' for e in ends]} -> {'PASS' if ok else 'FAIL'}",
          flush=True)
    return ok


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        case, rank, world, port = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        fn = {"skip": worker_skip, "torchft": worker_torchft}[case]
        sys.exit(fn(rank, world, port))
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    lib = os.path.abspath(sys.argv[1])
    which = sys.argv[2] if len(sys.argv) > 2 else "all"
    try:
        import torch
        if not torch.cuda.is_available():
            print("SKIP: torch sees no GPU")
            return 77
    except ImportError:
        print("SKIP: no torch")
        return 77
    ok = True
    if which in ("skip", "all"):
        # rank 0 must end (watchdog teardown: a non-zero exit) within the
        # driver's bound and never complete the call.  PyTorch 2.11 ends the
        # process about 77 s after the call with either library (its watchdog
        # waits past the 10 s timeout), so the bound is generous.
        ok &= run_case(lib, "skip", 2, {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}, 150,
                       lambda c, e, h: 0 not in h and c[0] not in (0, 3))
    if which in ("torchft", "all"):
        ok &= run_case(lib, "torchft", 3, {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0",
                                           "TORCH_NCCL_BLOCKING_WAIT": "1"}, 120,
                       lambda c, e, h: not h and c[0] == 0 and c[1] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
