"""Run a command under Nsight Compute and return ncu's stdout, or read a csv saved earlier: the part of
kernel_times.py and kernel_stalls.py that talks to ncu. Clocks and caches are left alone (--clock-control none,
--cache-control none: METHOD.md of the device machines), units are base units (ns, bytes), output is csv."""
import subprocess
import sys


def ncu_csv(tool, ncu_flags, command, csv_path=None, save=None):
    """ncu's csv text: read from csv_path, else from `ncu <fixed flags> <ncu_flags> <command>` (also written to save).
    tool names the caller in the error messages; exits 1 when ncu is missing or fails, or a file cannot be read or written."""
    if csv_path:
        try:
            with open(csv_path) as f:
                return f.read()
        except OSError as e:
            sys.exit(f"error: {tool}: cannot read --csv {csv_path}: {e.strerror}")
    ncu = ["ncu", "--clock-control", "none", "--cache-control", "none", "--csv", "--print-units", "base"] + ncu_flags
    try:
        p = subprocess.run(ncu + command, capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit(f"error: {tool}: ncu (Nsight Compute) is not on the PATH")
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-2000:] + p.stdout[-2000:])
        sys.exit(f"error: {tool}: ncu exited with {p.returncode}")
    if save:
        try:
            with open(save, "w") as f:
                f.write(p.stdout)
        except OSError as e:
            sys.exit(f"error: {tool}: cannot write --save {save}: {e.strerror}")
    return p.stdout
