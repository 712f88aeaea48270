"""The Lambda handlers' cold import: `import dispatcher.handlers` in a fresh interpreter, as the
runtime does it on a cold start (-B: the function's file system is read-only, so nothing is
written; only the package's own bytecode can be used).

Each PACKAGE is NAME=PATH[:PATH...], the sys.path the runtime gives a function: its code, then
its layer's python/ folder. Packages are timed in turns (one run of each, REPEAT times), so a
change of load on the machine falls on all of them alike. Example, after `sam build`:

    python3 bench/lambda_import.py --python python3.12 \\
        built=.aws-sam/build/DispatcherFunction:.aws-sam/build/LambdaDependencies/python
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile

TIMED = ("import sys, time\n"
         "wall, cpu = time.perf_counter(), time.process_time()\n"
         "import dispatcher.handlers\n"
         "print(time.perf_counter() - wall, time.process_time() - cpu, len(sys.modules))\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packages", nargs="+", metavar="NAME=PATH[:PATH...]")
    parser.add_argument("--python", required=True, help="an interpreter of the runtime's version")
    parser.add_argument("--repeat", type=int, default=11)
    args = parser.parse_args()
    packages = dict(p.split("=", 1) for p in args.packages)
    runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in packages}
    with tempfile.TemporaryDirectory() as cwd:  # nothing of the checkout on sys.path
        for _ in range(args.repeat):
            for name, path in packages.items():
                out = subprocess.run([args.python, "-s", "-B", "-c", TIMED], cwd=cwd, check=True,
                                     capture_output=True, text=True,
                                     env={"PATH": "/usr/bin:/bin", "PYTHONPATH": path}).stdout
                wall, cpu, modules = out.split()
                runs[name].append((float(wall), float(cpu), int(modules)))
    for name, measured in runs.items():
        walls = [w for w, _, _ in measured]
        cpus = [c for _, c, _ in measured]
        print(f"{name}: median {statistics.median(walls):.3f} s wall "
              f"({min(walls):.3f}-{max(walls):.3f}), {statistics.median(cpus):.3f} s CPU, "
              f"{measured[-1][2]} modules in sys.modules, {len(measured)} runs")


if __name__ == "__main__":
    main()
