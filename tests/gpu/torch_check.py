#!/usr/bin/env python3
"""PyTorch on Mend: torch.distributed with backend "nccl", every rank on cuda:0.

Run with Mend preloaded (tests/gpu/run.sh does this):

    LD_PRELOAD=$BUILDDIR/lib/libnccl.so.2 python3 tests/gpu/torch_check.py [--world-sizes 2,4]

For each world size, ranks are started with torch.multiprocessing (spawn), MASTER_ADDR=127.0.0.1
and a free port.  Each rank checks, with exact integer-valued data:
  - that Mend is the NCCL in use: the NCCL entry points resolve to the preloaded file, the
    "NCCL version ...-mend" banner (NCCL_DEBUG=WARN prints it at init), ncclGetVersion gives the
    version of Mend's nccl.h (torch.cuda.nccl.version() is only printed: it is the nccl.h PyTorch
    was built with);
  - all_reduce (float32, float16, bfloat16, int32 sum; float32 max and avg), all_gather,
    all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor, broadcast, barrier;
  - send/recv: a ring with batch_isend_irecv, and plain isend/irecv between rank pairs;
  - one DistributedDataParallel training step of a small MLP (device_ids=[0]) whose gradients and
    parameters match the same step done by DDP on CPU over a Gloo process group.
The parent prints "ok torch_w<N>_<check>" / "not ok ...: rank R: detail" lines (a check passes when
every rank passed it), a summary, and exits 1 on any failure, 77 when torch or a GPU is missing.
Every world size is bounded (--timeout, 120 s): ranks still running then are killed.

--reference runs the same checks on another libnccl (e.g. the one PyTorch ships), without the Mend
checks: each rank gets its own NCCL_HOSTID and NCCL uses sockets on lo, because NVIDIA's NCCL
refuses two ranks of one communicator on the same GPU.  It shows that the checks themselves are right.
"""
import argparse
import json
import os
import socket
import sys
import tempfile
import time
import traceback

STEP_TIMEOUT_S = 60  # torch.distributed's own timeout for one collective
N = 4099             # elements per rank in the collective checks (odd on purpose)


def say(line):
    """One write per line: ranks share stdout, and print() may split a line in two writes."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expected_library():
    """The libnccl file this run must use: $MEND_TEST_LIB, else the libnccl entry of LD_PRELOAD."""
    lib = os.environ.get("MEND_TEST_LIB")
    if not lib:
        for p in os.environ.get("LD_PRELOAD", "").replace(":", " ").split():
            if "libnccl" in os.path.basename(p):
                lib = p
    return os.path.realpath(lib) if lib else None


def mend_version():
    """(major, minor, patch) of the NCCL API Mend reports: NCCL_MAJOR/MINOR/PATCH of its nccl.h."""
    header = os.path.join(os.environ.get("MEND_BUILDDIR", "build"), "include", "nccl.h")
    parts = {}
    with open(header) as f:
        for line in f:
            words = line.split()
            if len(words) >= 3 and words[0] == "#define" and words[1] in ("NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH"):
                parts[words[1]] = int(words[2])
    return (parts.get("NCCL_MAJOR"), parts.get("NCCL_MINOR"), parts.get("NCCL_PATCH"))


def file_of(addr):
    """The file mapped at address addr in this process, or None."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= addr < hi and len(parts) >= 6:
                return os.path.realpath(parts[5])
    return None


def resolved_nccl():
    """The files that the NCCL entry points PyTorch calls resolve to in the global scope (what
    LD_PRELOAD decides).  PyTorch may also map its own libnccl by path; its symbols are then
    shadowed, which is what this looks at, not merely which files are mapped."""
    import ctypes
    g = ctypes.CDLL(None)
    files = set()
    for name in ("ncclAllReduce", "ncclCommInitRankConfig", "ncclGroupEnd", "ncclSend", "ncclGetVersion"):
        fn = getattr(g, name, None)
        files.add(file_of(ctypes.cast(fn, ctypes.c_void_p).value) if fn is not None else None)
    return files


def runtime_nccl_version():
    """(major, minor, patch) from ncclGetVersion as the process resolves it (the library in use).
    torch.cuda.nccl.version() is not that: it is NCCL_MAJOR/MINOR/PATCH of the nccl.h PyTorch was
    built with."""
    import ctypes
    code = ctypes.c_int(0)
    if ctypes.CDLL(None).ncclGetVersion(ctypes.byref(code)) != 0:
        return None
    v = code.value  # major*10000 + minor*100 + patch since NCCL 2.9
    return (v // 10000, v // 100 % 100, v % 100)


def mapped_nccl():
    """Every libnccl file mapped into this process."""
    paths = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and "libnccl" in os.path.basename(parts[5]):
                paths.add(os.path.realpath(parts[5]))
    return paths


class Rank:
    """One rank's checks; results go to a JSON file the parent reads."""

    def __init__(self, rank, world, reference):
        import torch
        self.torch = torch
        self.rank, self.world, self.reference = rank, world, reference
        self.results = []
        self.dev = torch.device("cuda", 0)

    def check(self, name, fn):
        try:
            detail = fn()
            self.results.append((name, detail is None, detail or ""))
        except Exception as e:  # a failed call is a failed check; the next check still runs
            self.results.append((name, False, "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")))
            traceback.print_exc(file=sys.stderr)

    def val(self, r, n, salt=0):
        """Rank r's input: small integers, exact in every dtype used (sums stay below 64)."""
        t = self.torch
        i = t.arange(n, dtype=t.int64)
        return ((i * 7 + r * 3 + salt) % 11 - 5).to(t.float64)

    def same(self, got, want, what):
        t = self.torch
        got = got.cpu()
        want = want.to(got.dtype)
        if t.equal(got, want):
            return None
        bad = (got.to(t.float64) != want.to(t.float64)).nonzero()
        k = int(bad[0][0]) if len(bad) else -1
        return "%s: %d elements differ, first [%d] = %s, want %s" % (
            what, len(bad), k, got.flatten()[k].item(), want.flatten()[k].item())

    # ---- Mend is the NCCL in use

    def check_library(self, banner):
        t = self.torch
        version = t.cuda.nccl.version()
        say("# rank %d: torch.cuda.nccl.version() = %s, libnccl mapped from %s" % (
            self.rank, version, sorted(mapped_nccl())))
        if self.reference:
            return
        want = expected_library()
        self.check("mend_resolved", lambda: None if want and resolved_nccl() == {want} else
                   "NCCL entry points resolve to %s, want only %s (mapped: %s)" % (
                       sorted(map(str, resolved_nccl())), want, sorted(mapped_nccl())))
        # Mend prints its banner in every process, NVIDIA's NCCL on rank 0 only: rank 0 must have it.
        self.check("mend_banner_rank0", lambda: None if self.rank != 0 or "-mend" in banner else
                   "no 'NCCL version ...-mend' line at init (NCCL_DEBUG=WARN); got %r" % banner[:300])
        want_version, got_version = mend_version(), runtime_nccl_version()
        self.check("mend_version", lambda: None if got_version == want_version else
                   "ncclGetVersion gives %s, want %s (Mend's nccl.h)" % (got_version, want_version))

    # ---- collectives

    def all_reduce(self, dtype, op_name):
        t, dist = self.torch, self.dist
        x = self.val(self.rank, N).to(dtype).to(self.dev)
        ins = t.stack([self.val(r, N) for r in range(self.world)])
        if op_name == "sum":
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
            want = ins.sum(0)
        elif op_name == "max":
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
            want = ins.max(0).values
        else:  # avg: world sizes 2 and 4 divide exactly in binary
            dist.all_reduce(x, op=dist.ReduceOp.AVG)
            want = ins.sum(0) / self.world
        t.cuda.synchronize()
        return self.same(x, want, "all_reduce %s %s" % (dtype, op_name))

    def all_gather(self):
        t, dist = self.torch, self.dist
        mine = self.val(self.rank, N).float().to(self.dev)
        out = t.empty(self.world * N, dtype=t.float32, device=self.dev)
        dist.all_gather_into_tensor(out, mine)
        outs = [t.empty(N, dtype=t.float32, device=self.dev) for _ in range(self.world)]
        dist.all_gather(outs, mine)
        t.cuda.synchronize()
        want = t.cat([self.val(r, N) for r in range(self.world)])
        return self.same(out, want, "all_gather_into_tensor") or self.same(t.cat(outs), want, "all_gather")

    def reduce_scatter(self):
        t, dist = self.torch, self.dist
        big = self.val(self.rank, self.world * N, salt=1).float().to(self.dev)
        out = t.empty(N, dtype=t.float32, device=self.dev)
        dist.reduce_scatter_tensor(out, big)
        out2 = t.empty(N, dtype=t.float32, device=self.dev)
        dist.reduce_scatter(out2, list(big.chunk(self.world)))
        t.cuda.synchronize()
        want = sum(self.val(r, self.world * N, salt=1) for r in range(self.world))[self.rank * N:(self.rank + 1) * N]
        return self.same(out, want, "reduce_scatter_tensor") or self.same(out2, want, "reduce_scatter")

    def broadcast(self):
        t, dist = self.torch, self.dist
        root = self.world - 1
        x = self.val(self.rank, N, salt=2).to(t.int32).to(self.dev)
        dist.broadcast(x, src=root)
        t.cuda.synchronize()
        return self.same(x, self.val(root, N, salt=2), "broadcast from %d" % root)

    def ring(self):
        t, dist = self.torch, self.dist
        nxt, prv = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        x = self.val(self.rank, N, salt=3).float().to(self.dev)
        y = t.full((N,), -99.0, device=self.dev)
        ops = [dist.P2POp(dist.isend, x, nxt), dist.P2POp(dist.irecv, y, prv)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        t.cuda.synchronize()
        return self.same(y, self.val(prv, N, salt=3), "batch_isend_irecv ring, from %d" % prv)

    def pairs(self):
        """Plain isend/irecv: rank 2k and 2k+1 swap buffers (the even rank sends first)."""
        t, dist = self.torch, self.dist
        peer = self.rank ^ 1
        if peer >= self.world:
            return None
        x = self.val(self.rank, N, salt=4).float().to(self.dev)
        y = t.zeros(N, device=self.dev)
        if self.rank % 2 == 0:
            reqs = [dist.isend(x, peer), dist.irecv(y, peer)]
        else:
            reqs = [dist.irecv(y, peer), dist.isend(x, peer)]
        for req in reqs:
            req.wait()
        t.cuda.synchronize()
        return self.same(y, self.val(peer, N, salt=4), "isend/irecv with %d" % peer)

    def barrier(self):
        self.dist.barrier(device_ids=[0])
        self.torch.cuda.synchronize()

    # ---- DDP against Gloo

    def ddp_step(self):
        """One SGD step of DDP on cuda:0 over NCCL and of DDP on CPU over Gloo, same seed and data."""
        import copy
        t, nn = self.torch, self.torch.nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        t.backends.cuda.matmul.allow_tf32 = False
        t.backends.cudnn.allow_tf32 = False
        t.manual_seed(1234)
        base = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
        models = {"nccl": (DDP(copy.deepcopy(base).to(self.dev), device_ids=[0], output_device=0), self.dev),
                  "gloo": (DDP(copy.deepcopy(base), process_group=self.gloo), t.device("cpu"))}
        g = t.Generator().manual_seed(100 + self.rank)  # every rank its own data: averaging matters
        x, y = t.randn(16, 32, generator=g), t.randn(16, 8, generator=g)
        got = {}
        for name, (model, dev) in models.items():
            opt = t.optim.SGD(model.parameters(), lr=0.1)
            opt.zero_grad()
            nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
            grads = [p.grad.detach().cpu().clone() for p in model.parameters()]
            opt.step()
            got[name] = (grads, [p.detach().cpu().clone() for p in model.parameters()])
        t.cuda.synchronize()
        for what, k in (("gradient", 0), ("parameter", 1)):
            for i, (a, b) in enumerate(zip(got["nccl"][k], got["gloo"][k])):
                if not t.allclose(a, b, rtol=1e-5, atol=1e-6):
                    return "%s %d differs from the Gloo reference by up to %g" % (what, i, (a - b).abs().max().item())
        return None

    def run_all(self):
        t = self.torch
        for dtype in (t.float32, t.float16, t.bfloat16, t.int32):
            name = str(dtype).replace("torch.", "")
            self.check("all_reduce_%s_sum" % name, lambda d=dtype: self.all_reduce(d, "sum"))
        self.check("all_reduce_float32_max", lambda: self.all_reduce(t.float32, "max"))
        self.check("all_reduce_float32_avg", lambda: self.all_reduce(t.float32, "avg"))
        self.check("all_gather", self.all_gather)
        self.check("reduce_scatter", self.reduce_scatter)
        self.check("broadcast", self.broadcast)
        self.check("send_recv_ring", self.ring)
        self.check("send_recv_pairs", self.pairs)
        self.check("barrier", self.barrier)
        self.check("ddp_step_matches_gloo", self.ddp_step)


def capture_stdout(path):
    """Send fd 1 (where the library prints its banner) to a file; returns the saved fd."""
    sys.stdout.flush()
    saved = os.dup(1)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.close(fd)
    return saved


def restore_stdout(saved):
    sys.stdout.flush()
    os.dup2(saved, 1)
    os.close(saved)


def rank_main(rank, world, port, outdir, reference):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_DEBUG="WARN",
                      TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING="false")
    if reference:  # see --reference: NVIDIA's NCCL then accepts several ranks on one GPU
        os.environ.update(NCCL_HOSTID="mend-reference-%d" % rank, NCCL_SOCKET_IFNAME="lo", NCCL_IB_DISABLE="1",
                          NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1", NCCL_NVLS_ENABLE="0")
    results = []
    try:
        from datetime import timedelta
        import torch
        import torch.distributed as dist
        r = Rank(rank, world, reference)
        r.dist = dist
        results = r.results
        torch.cuda.set_device(0)
        banner_file = os.path.join(outdir, "stdout.%d" % rank)
        saved = capture_stdout(banner_file)
        try:
            dist.init_process_group("nccl", rank=rank, world_size=world, device_id=r.dev,
                                    timeout=timedelta(seconds=STEP_TIMEOUT_S))
            r.check("init_and_first_all_reduce", lambda: r.all_reduce(torch.float32, "sum"))
        finally:
            restore_stdout(saved)
        with open(banner_file) as f:
            banner = f.read()
        for line in banner.splitlines():
            say("# rank %d stdout: %s" % (rank, line))
        r.check_library(banner)
        r.gloo = dist.new_group(backend="gloo")
        r.run_all()
        r.check("destroy_process_group", lambda: dist.destroy_process_group())
    except Exception as e:
        results.append(("rank_ran_to_the_end", False, "%s: %s" % (type(e).__name__, e)))
        traceback.print_exc(file=sys.stderr)
    with open(os.path.join(outdir, "results.%d.json" % rank), "w") as f:
        json.dump(results, f)


def report_world(world, outdir, why_incomplete):
    """One line per check (ok when every rank passed it); returns (passed, failed)."""
    per_rank = {}
    for r in range(world):
        try:
            with open(os.path.join(outdir, "results.%d.json" % r)) as f:
                per_rank[r] = json.load(f)
        except (OSError, ValueError):
            per_rank[r] = None
    names = []
    for res in per_rank.values():
        for name, _, _ in res or []:
            if name not in names:
                names.append(name)
    passed = failed = 0
    for name in names:
        bad = []
        for r in range(world):
            entry = [e for e in per_rank[r] or [] if e[0] == name]
            if not entry:
                bad.append("rank %d: no result" % r)
            elif not entry[0][1]:
                bad.append("rank %d: %s" % (r, entry[0][2]))
        line = "torch_w%d_%s" % (world, name)
        say("ok %s" % line if not bad else "not ok %s: %s" % (line, "; ".join(bad)[:600]))
        passed, failed = passed + (not bad), failed + bool(bad)
    missing = [r for r in range(world) if per_rank[r] is None]
    ok = not why_incomplete and not missing
    say("ok torch_w%d_all_ranks_finished" % world if ok else "not ok torch_w%d_all_ranks_finished: %s%s" % (
        world, why_incomplete or "", " (no results from ranks %s)" % missing if missing else ""))
    return passed + ok, failed + (not ok)


def run_world(world, args):
    import torch.multiprocessing as mp
    outdir = tempfile.mkdtemp(prefix="mend-torch-")
    ctx = mp.start_processes(rank_main, args=(world, free_port(), outdir, args.reference), nprocs=world,
                             join=False, start_method="spawn")
    deadline, why = time.monotonic() + args.timeout, None
    while True:
        try:
            if ctx.join(timeout=1):
                break
        except Exception as e:  # a rank died (signal, non-zero exit)
            why = "a rank failed: %s" % str(e).splitlines()[0]
            break
        if time.monotonic() > deadline:
            why = "timed out after %d s" % args.timeout
            break
    for p in ctx.processes:
        if p.is_alive():
            p.kill()
        p.join(10)
    return report_world(world, outdir, why)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world-sizes", default="2,4", help="comma-separated world sizes (default 2,4)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per world size (default 120)")
    ap.add_argument("--reference", action="store_true", help="check another libnccl (see the module doc)")
    args = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        say("# skip torch_check: cannot import torch (%s)" % e)
        return 77
    if not torch.cuda.is_available():
        say("# skip torch_check: torch sees no CUDA device")
        return 77
    say("# torch %s, CUDA %s, %s" % (torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0)))
    if not args.reference and not expected_library():
        say("not ok torch_mend_preloaded: neither MEND_TEST_LIB nor LD_PRELOAD names Mend's libnccl.so.2")
        return 1
    if args.reference:
        say("# reference run: the checks that Mend is loaded are left out")
    os.environ["NCCL_DEBUG"] = "WARN"
    passed = failed = 0
    for world in [int(w) for w in args.world_sizes.split(",") if w]:
        start = time.monotonic()
        p, f = run_world(world, args)
        passed, failed = passed + p, failed + f
        say("# world size %d: %d passed, %d failed, %.1f s" % (world, p, f, time.monotonic() - start))
    say("# torch_check summary: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
