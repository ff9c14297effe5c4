# SPDX-License-Identifier: MIT
"""The parts of the package's torch and CUDA path that run without a GPU.

    test_torch_args.py --lib PATH

- the device registration cache (collc/_cuda.py) against a fake driver:
  whole allocations registered once, hits by buffer id, a freed and
  replaced allocation deregistered before its successor, nothing registered
  while the stream is being captured (a clear error instead), clear();
- `import collc.torch` without torch: an ImportError that names PyTorch;
  with torch (CPU): the backend "collc" is registered with torch.distributed.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")

failures = []
checks = 0


def expect(cond, msg):
    global checks
    checks += 1
    if not cond:
        failures.append(msg)
        print("FAIL", msg, flush=True)


class FakeDriver:
    """Allocations as (base, size, buffer id); lookups count calls."""

    def __init__(self):
        self.allocs = []
        self.next_id = 100
        self.range_calls = 0

    def alloc(self, base, size):
        self.allocs = [a for a in self.allocs if not (a[0] < base + size and base < a[0] + a[1])]
        self.next_id += 1
        self.allocs.append((base, size, self.next_id))
        return self.next_id

    def _find(self, ptr):
        for a in self.allocs:
            if a[0] <= ptr < a[0] + a[1]:
                return a
        raise RuntimeError(f"fake driver: {ptr:#x} is not device memory")

    def buffer_id(self, ptr):
        return self._find(ptr)[2]

    def address_range(self, ptr):
        self.range_calls += 1
        a = self._find(ptr)
        return a[0], a[1]


def test_devregs(collc):
    from collc import _cuda

    calls = []
    drv = FakeDriver()
    regs = _cuda.DevRegs(lambda b, s, d: calls.append(("reg", b, s, d)),
                         lambda b: calls.append(("dereg", b)), drv)
    asked = []

    def capturing(v):
        def f():
            asked.append(v)
            return v
        return f

    MB = 1 << 20
    drv.alloc(0x10000000, 20 * MB)  # a caching-allocator segment
    # A tensor inside the segment: the whole segment is registered, once.
    expect(regs.ensure(0x10000000 + 4096, 1024, 0, capturing(False)) is True,
           "first use did not register")
    expect(calls == [("reg", 0x10000000, 20 * MB, 0)], f"first registration: {calls}")
    calls.clear()
    asked.clear()
    # Another tensor of the same segment: a hit, no driver range lookup, no capture query.
    n = drv.range_calls
    expect(regs.ensure(0x10000000 + 8 * MB, 4 * MB, 0, capturing(True)) is False,
           "a tensor of a registered segment registered again")
    expect(not calls and not asked and drv.range_calls == n,
           f"a hit made calls: {calls}, capture asked {asked}")
    # The segment freed, another mapped overlapping it: the old one goes first.
    drv.alloc(0x10000000 + 2 * MB, 20 * MB)
    regs.ensure(0x10000000 + 3 * MB, 64, 0, capturing(False))
    expect(calls == [("dereg", 0x10000000), ("reg", 0x10000000 + 2 * MB, 20 * MB, 0)],
           f"replaced segment: {calls}")
    expect(len(regs) == 1, f"{len(regs)} registrations after a replacement, not 1")
    calls.clear()
    # Same address, new allocation (same range, new buffer id): registered anew.
    drv.alloc(0x10000000 + 2 * MB, 20 * MB)
    regs.ensure(0x10000000 + 2 * MB, 64, 0, capturing(False))
    expect(calls == [("dereg", 0x10000000 + 2 * MB), ("reg", 0x10000000 + 2 * MB, 20 * MB, 0)],
           f"same range, new allocation: {calls}")
    calls.clear()
    # Not registered while capturing: a clear error, and nothing registered.
    drv.alloc(0x40000000, 2 * MB)
    try:
        regs.ensure(0x40000000, 256, 0, capturing(True))
        expect(False, "registration during capture: no error")
    except RuntimeError as e:
        expect("captur" in str(e) and "before" in str(e), f"capture error says: {e}")
    expect(not calls, f"calls during capture: {calls}")
    # After the capture it registers.
    regs.ensure(0x40000000, 256, 0, capturing(False))
    expect(calls == [("reg", 0x40000000, 2 * MB, 0)], f"after capture: {calls}")
    # A buffer running past its allocation.
    try:
        regs.ensure(0x40000000 + 2 * MB - 128, 256, 0, capturing(False))
        expect(False, "a buffer past its allocation: no error")
    except ValueError as e:
        expect("more than one" in str(e), f"past the allocation: {e}")
    # The same allocation on another device index is another registration.
    calls.clear()
    regs.ensure(0x40000000, 256, 1, capturing(False))
    expect(calls == [("dereg", 0x40000000), ("reg", 0x40000000, 2 * MB, 1)],
           f"another device: {calls}")
    calls.clear()
    regs.clear()
    expect(sorted(calls) == sorted([("dereg", 0x10000000 + 2 * MB), ("dereg", 0x40000000)]),
           f"clear: {calls}")
    expect(len(regs) == 0, "registrations left after clear()")


def test_torch_module(lib):
    env = dict(os.environ, PYTHONPATH=PKG, COLLC_LIB=lib, PYTHONDONTWRITEBYTECODE="1")
    try:
        import torch  # noqa: F401

        have = True
    except ImportError:
        have = False
    if not have:
        p = subprocess.run([sys.executable, "-c", "import collc.torch"], env=env,
                           capture_output=True, text=True, timeout=60)
        expect(p.returncode != 0 and "ImportError" in p.stderr and "PyTorch" in p.stderr,
               f"import collc.torch without torch: rc {p.returncode}, {p.stderr[-300:]}")
        print("torch is not installed: its backend registration is not checked here")
        return
    p = subprocess.run([sys.executable, "-c",
                        "import collc.torch, torch.distributed as dist; "
                        "assert 'COLLC' in dist.Backend._plugins; "
                        "assert dist.Backend('collc') == 'collc'; print('registered')"],
                       env=env, capture_output=True, text=True, timeout=120)
    expect(p.returncode == 0 and "registered" in p.stdout,
           f"import collc.torch with torch: rc {p.returncode}, {p.stderr[-600:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    a = ap.parse_args()
    os.environ["COLLC_LIB"] = a.lib
    sys.path.insert(0, PKG)
    import collc

    test_devregs(collc)
    test_torch_module(a.lib)
    print(f"{checks} checks, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
