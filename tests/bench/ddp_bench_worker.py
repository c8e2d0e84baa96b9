"""One worker of tests/bench/ddp_bench.sh: timed data-parallel training steps
of one model with one way of averaging the gradients, on synthetic inputs.

    ddp_bench_worker.py --mode starling|gloo|dopt|local --model lenet|resnet18
        --steps S --warmup W --batch B --out PREFIX

Modes (every one trains the same model with torch SGD, momentum 0.9, in
the worker):
  gloo      DistributedDataParallel on torch.distributed's Gloo backend
            (env:// rendezvous: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
            GLOO_SOCKET_IFNAME picks the host's nic)
  starling  DistributedDataParallel on the "starling" backend (import
            starling.torch; the daemon at STARLING_SOCKET runs the
            all-reduces; torch's env:// store only for the rendezvous)
  dopt      Starling's own starling.torch.DistributedOptimizer (the job runs
            with --optimizer none: the daemons all-reduce, the worker steps)
  local     no gradient exchange at all (a Gloo group only for the two
            barriers around the timed steps): the compute floor of a step
            with every worker computing at once on the same cores

Each worker times every step (zero_grad, forward, loss, backward,
optimizer.step(); for DDP the backward ends when every bucket's all-reduce
is done) and reads its host's nic byte counters
(/sys/class/net/NIC/statistics, this network namespace's) and, with
--metrics_url, its daemon's starling_transport_sent_bytes_total, both
around the timed steps (between two barriers). It writes one JSON object
to PREFIX.<rank>.json; ddp_bench_report.py makes the table. Over the same
window it records its own CPU seconds (every thread: for gloo, Gloo's
network threads too), its daemon's (the starling-node whose command line
names STARLING_SOCKET) and the machine's busy and total core-seconds
(/proc/stat), so that the report can tell how much of the machine the
processes of other people took during the run.
"""

import argparse
import collections
import importlib
import json
import os
import re
import time
import urllib.request

import torch
import torch.nn as nn
import torch.nn.functional as F
# worker/examples/pytorch/lenet.py (ddp_bench.sh puts it beside the package)
from lenet import LeNet

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--mode", choices=["starling", "gloo", "dopt", "local"],
                    required=True)
parser.add_argument("--model", choices=["lenet", "resnet18"], required=True)
parser.add_argument("--steps", type=int, default=100, help="timed steps")
parser.add_argument("--warmup", type=int, default=10, help="untimed steps first")
parser.add_argument("--batch", type=int, default=32, help="per worker")
parser.add_argument("--image_size", type=int, default=32,
                    help="resnet18's input height and width (3 channels)")
parser.add_argument("--bucket_mb", type=float, default=None,
                    help="DDP's bucket_cap_mb and DistributedOptimizer's "
                    "bucket_bytes (default: each one's own, 25 MB and 256 KiB)")
parser.add_argument("--threads", type=int, default=1, help="torch threads")
parser.add_argument("--trace_buckets", action="store_true",
                    help="DDP modes: all-reduce through a comm hook equal to "
                    "DDP's default that records each bucket's launch and "
                    "completion (bucket_trace in the JSON)")
parser.add_argument("--nic", default="nic0",
                    help="this host's network interface (byte counters)")
parser.add_argument("--metrics_url", default="",
                    help="the daemon's /metrics (starling and dopt modes)")
parser.add_argument("--out", required=True,
                    help="writes OUT.<rank>.json")
args = parser.parse_args()


class _Block(nn.Module):
    """ResNet's basic block (torchvision's BasicBlock, same parameters)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


def resnet18_here():
    """torchvision's resnet18() (11,689,512 parameters), for machines
    without python3-torchvision."""
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
              nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [_Block(cin, cout, stride), _Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers)


def build_model():
    """(model, input shape without the batch, classes, where it came from)."""
    if args.model == "lenet":
        return LeNet(), (1, 28, 28), 10, "train.py's LeNet"
    try:
        import torchvision
    except ImportError:
        return (resnet18_here(), (3, args.image_size, args.image_size), 1000,
                "ResNet-18 defined in ddp_bench_worker.py")
    return (torchvision.models.resnet18(),
            (3, args.image_size, args.image_size), 1000,
            "torchvision %s resnet18()" % torchvision.__version__)


def nic_bytes():
    base = "/sys/class/net/%s/statistics/" % args.nic
    with open(base + "tx_bytes") as tx, open(base + "rx_bytes") as rx:
        return int(tx.read()), int(rx.read())


# The daemon's counters read around the timed steps (summed over their
# label sets; the collective durations also by algorithm).
_DAEMON_SERIES = {
    "sent_bytes": "starling_transport_sent_bytes_total",
    "allreduce_s": "starling_node_allreduce_seconds_sum",
    "allreduces": "starling_node_allreduce_seconds_count",
}


def daemon_metrics():
    """{name: value} of _DAEMON_SERIES, plus "collective_s/ALGO" and
    "collectives/ALGO" (starling_collective_duration_seconds' sum and
    count for all-reduces by algorithm), or None without --metrics_url or
    an answer."""
    if not args.metrics_url:
        return None
    try:
        with urllib.request.urlopen(args.metrics_url, timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    values = collections.defaultdict(float)
    for name, labels, value in re.findall(
            r"^([a-z_]+)(?:\{([^}]*)\})? (\S+)$", text, re.M):
        for key, series in _DAEMON_SERIES.items():
            if name == series:
                values[key] += float(value)
        if name.startswith("starling_collective_duration_seconds_"):
            label = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            if label.get("op") not in ("allreduce", "all_reduce"):
                continue
            algo = label.get("algorithm", "?")
            if name.endswith("_sum"):
                values["collective_s/" + algo] += float(value)
            elif name.endswith("_count"):
                values["collectives/" + algo] += float(value)
    return dict(values)


def delta(after, before):
    if after is None or before is None:
        return None
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def machine_jiffies():
    """(busy, total) clock ticks of every core since boot (/proc/stat):
    busy counts user, nice, system, irq, softirq and steal."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def daemon_pid():
    """The pid of the starling-node serving STARLING_SOCKET (its command
    line names the socket), or None."""
    socket = os.environ.get("STARLING_SOCKET", "")
    if not socket:
        return None
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if (argv and argv[0].endswith(b"starling-node") and
                ("--worker_socket=" + socket).encode() in argv):
            return int(pid)
    return None


def process_cpu_s(pid):
    """User + system CPU seconds of process `pid` (all its threads), or
    None once it is gone."""
    if pid is None:
        return None
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class _Trace:
    """Per step (--trace_buckets): when backward returned and, per DDP
    bucket, its bytes, when DDP launched its all-reduce and when that
    completed, in ms since the step began."""

    def __init__(self):
        self.steps = []
        self.start = 0.0
        self.backward_done = None

    def now(self):
        return 1000 * (time.perf_counter() - self.start)

    def begin(self):
        if self.steps and self.backward_done is not None:
            self.steps[-1]["backward_done_ms"] = self.backward_done
        self.start = time.perf_counter()
        self.backward_done = None
        self.steps.append({"buckets": []})

    def finish(self):
        if self.steps and self.backward_done is not None:
            self.steps[-1]["backward_done_ms"] = self.backward_done


TRACE = _Trace()


def traced_allreduce_hook(world):
    """DDP's default all-reduce hook (torch's allreduce_hook: divide by the
    world size, all-reduce, use the result) that also records each
    bucket's launch and completion times in TRACE."""
    import torch.distributed as dist

    def hook(unused_state, bucket):
        tensor = bucket.buffer()
        record = [tensor.numel() * tensor.element_size(), TRACE.now(), None]
        TRACE.steps[-1]["buckets"].append(record)
        tensor.div_(world)

        def done(future):
            record[2] = TRACE.now()
            return future.value()[0]

        return dist.all_reduce(tensor, async_op=True).get_future().then(done)

    return hook


def main():
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)  # the same initial parameters everywhere
    model, shape, classes, origin = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    bucket_bytes = (None if args.bucket_mb is None else
                    int(args.bucket_mb * (1 << 20)))
    if args.mode == "dopt":
        import starling.torch as st
        st.init()
        rank, world = st.rank(), st.size()
        st.broadcast_parameters(model.state_dict(), root_rank=0)
        optimizer = st.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters(),
            bucket_bytes=bucket_bytes)
        barrier = st.barrier
        net = model
    else:
        import torch.distributed as dist
        if args.mode == "starling":
            importlib.import_module("starling.torch")  # registers the backend
        dist.init_process_group("gloo" if args.mode == "local" else args.mode)
        rank, world = dist.get_rank(), dist.get_world_size()
        barrier = dist.barrier
        if args.mode == "local":
            net = model
        else:
            ddp = {} if args.bucket_mb is None else {"bucket_cap_mb": args.bucket_mb}
            net = nn.parallel.DistributedDataParallel(model, **ddp)
            if args.trace_buckets:
                net.register_comm_hook(None, traced_allreduce_hook(world))

    generator = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn((args.batch,) + shape, generator=generator)
    y = torch.randint(0, classes, (args.batch,), generator=generator)

    def step():
        TRACE.begin()
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        TRACE.backward_done = TRACE.now()
        optimizer.step()
        return loss

    losses = []
    for _ in range(args.warmup):
        losses.append(step().item())
    TRACE.steps.clear()
    daemon = daemon_pid() if args.mode in ("starling", "dopt") else None
    barrier()
    metrics0, (tx0, rx0) = daemon_metrics(), nic_bytes()
    jiffies0, daemon_cpu0 = machine_jiffies(), process_cpu_s(daemon)
    cpu0 = time.process_time()
    times = []
    start = time.perf_counter()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())  # outside the timed part
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    TRACE.finish()
    barrier()
    metrics1, (tx1, rx1) = daemon_metrics(), nic_bytes()
    daemon_delta = delta(metrics1, metrics0)
    jiffies1, daemon_cpu1 = machine_jiffies(), process_cpu_s(daemon)
    params = list(model.parameters())
    with torch.no_grad():
        checksum = float(sum(p.double().sum() for p in params))
    result = {
        "mode": args.mode, "model": args.model, "origin": origin,
        "rank": rank, "world": world, "batch": args.batch,
        "input": list(shape), "steps": args.steps, "warmup": args.warmup,
        "parameters": sum(p.numel() for p in params),
        "tensors": len(params),
        "gradient_bytes": sum(p.numel() * p.element_size() for p in params),
        "bucket_mb": args.bucket_mb,
        "step_ms": [1000 * t for t in times], "wall_s": wall,
        "tx_bytes": tx1 - tx0, "rx_bytes": rx1 - rx0,
        "daemon_sent_bytes": (daemon_delta or {}).get("sent_bytes"),
        # Over the timed steps and the barrier that ends them.
        "daemon_metrics": daemon_delta,
        "worker_cpu_s": cpu,
        "daemon_cpu_s": (None if daemon_cpu0 is None or daemon_cpu1 is None
                         else daemon_cpu1 - daemon_cpu0),
        "machine_busy_s": (jiffies1[0] - jiffies0[0]) / os.sysconf("SC_CLK_TCK"),
        "machine_total_s": (jiffies1[1] - jiffies0[1]) / os.sysconf("SC_CLK_TCK"),
        "bucket_trace": TRACE.steps if args.trace_buckets else None,
        "loss_first": losses[0], "loss_last": losses[-1],
        "checksum": checksum,
    }
    path = "%s.%d.json" % (args.out, rank)
    with open(path + ".tmp", "w") as out:
        json.dump(result, out)
    os.replace(path + ".tmp", path)
    if args.mode in ("gloo", "starling", "local"):
        import torch.distributed as dist
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
