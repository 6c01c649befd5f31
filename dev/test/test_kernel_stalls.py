"""Tests for scripts/kernel_stalls.py: parsing Nsight Compute's raw-page csv, per-kernel averages, names, errors."""
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kernel_stalls.py"
sys.path.insert(0, str(SCRIPT.parent))
import kernel_stalls  # noqa: E402

# ncu --page raw --csv --print-units base: the profiled program's own output first, then one header row of columns
# (launch attributes, then one column per metric), a units row, and one row per kernel launch.
METRICS = ["gpu__time_duration.sum", "launch__registers_per_thread", "smsp__warps_active.avg.per_cycle_active",
           "smsp__issue_active.avg.pct_of_peak_sustained_active", "smsp__average_warp_latency_per_inst_issued.ratio",
           "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
           "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
           "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
           "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"]
ATTRS = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
         "Grid Size", "Device", "CC"]
FWD = ("void attn_fwd_tc_kernel<64, 2, 4, 64, 1, 0, true, false, false, false>(__nv_bfloat16 *, float *, "
       "const __nv_bfloat16 *, int, int, float, unsigned int *, AttnTcastArgs)")
DKV = "void attn_bwd_dkv_tc_kernel<64, 2, 4, 32, false, 1>(__nv_bfloat16 *, const __nv_bfloat16 *)"


def csv_line(cells):
    return ",".join(f'"{c}"' for c in cells)


def launch(i, name, values):
    return csv_line([i, 1, "train", "h", name, 1, 7, "(128, 1, 1)", "(8, 768, 1)", 0, "9.0"] + values)


def sample_csv():
    units = ["ns", "register/thread", "warp", "%", "cycle", "ratio", "ratio", "ratio", "%", "%", "%"]
    lines = ["==PROF== Connected to process 1", "step    1/1 | loss 10.9 | 120.0 ms",
             csv_line(ATTRS + METRICS), csv_line([""] * len(ATTRS) + units),
             launch(0, FWD, ["767,000", 254, 1.9, 41.0, 9.0, 1.0, 3.0, 0.5, 40.0, 20.0, 55.0]),
             launch(1, DKV, ["931000", 254, 1.9, 50.0, 7.0, 2.0, 1.0, 1.5, 30.0, 10.0, 60.0]),
             launch(2, FWD, ["769,000", 254, 2.1, 43.0, 11.0, 1.2, 2.6, 0.7, 42.0, 22.0, 57.0])]
    return "\n".join(lines) + "\n"


def test_launches_parsed_units_row_and_program_output_skipped():
    rows = list(kernel_stalls.read_kernels(sample_csv()))
    assert [n for n, _ in rows] == [FWD, DKV, FWD]
    assert rows[0][1]["gpu__time_duration.sum"] == 767000.0
    assert "Block Size" not in rows[0][1]  # not a number


@pytest.mark.parametrize("name, short", [
    (FWD, "attn_fwd_tc_kernel<64, 2, 4, 64, 1, 0, true, false, false, false>"),
    ("gemm_dbias_finish_kernel(__nv_bfloat16 *, const float *, int, int)", "gemm_dbias_finish_kernel"),
    ("void f<(int)2, g<3>(int)>(float)", "f<(int)2, g<3>(int)>"),
])
def test_short_name(name, short):
    assert kernel_stalls.short_name(name) == short


def test_summary_averages_launches_and_orders_stalls_and_pipes(capsys):
    kernel_stalls.summarize(sample_csv(), top_stalls=2, top_pipes=2)
    out = capsys.readouterr().out.splitlines()
    # kernels by total time: the forward (2 x 0.768 ms) before dK/dV (0.931 ms)
    assert out[0] == "attn_fwd_tc_kernel<64, 2, 4, 64, 1, 0, true, false, false, false>  (2 calls)"
    assert out[1] == "   ms 0.7680 | regs 254 | warps/sched 2.00 | issue % 42.0 | cycles/inst 10.00"
    # stalls: math_pipe_throttle (2.8) then barrier (1.1), shares of all listed reasons (2.8 + 1.1 + 0.6 = 4.5)
    assert out[2] == "   stalls (cycles per issued instruction): math_pipe_throttle 2.80 (62%), barrier 1.10 (24%)"
    assert out[3] == "   pipes (% of peak): tensor_op_hmma 56.0%, fma 41.0%"
    assert out[4].startswith("attn_bwd_dkv_tc_kernel<64, 2, 4, 32, false, 1>  (1 calls)")
    assert "barrier 2.00 (44%)" in out[6]


def test_cli(tmp_path):
    f = tmp_path / "raw.csv"
    f.write_text(sample_csv())
    out = subprocess.run([sys.executable, str(SCRIPT), "--csv", str(f), "--stalls", "1"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "math_pipe_throttle 2.80 (62%)" in out.stdout and "barrier 1.10" not in out.stdout


def test_csv_without_table_is_an_error(tmp_path):
    f = tmp_path / "empty.csv"
    f.write_text("==PROF== No kernels were profiled.\n")
    out = subprocess.run([sys.executable, str(SCRIPT), "--csv", str(f)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "no ncu raw csv table" in out.stderr


def test_table_without_launches_is_an_error(tmp_path):
    f = tmp_path / "units_only.csv"
    f.write_text("\n".join(sample_csv().splitlines()[:4]) + "\n")
    out = subprocess.run([sys.executable, str(SCRIPT), "--csv", str(f)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "no kernel rows" in out.stderr


def test_bad_counts_are_refused():
    out = subprocess.run([sys.executable, str(SCRIPT), "--count", "0", "--", "true"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0
    assert "--count" in out.stderr


def test_missing_ncu_is_an_error(tmp_path):
    env = {"PATH": str(tmp_path)}  # no ncu there
    out = subprocess.run([sys.executable, str(SCRIPT), "--", "true"], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode != 0
    assert "ncu (Nsight Compute) is not on the PATH" in out.stderr


@pytest.mark.parametrize("script", ["kernel_stalls.py", "kernel_times.py"])
def test_unreadable_csv_names_the_file(tmp_path, script):
    missing = tmp_path / "missing.csv"
    out = subprocess.run([sys.executable, str(SCRIPT.parent / script), "--csv", str(missing)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1
    assert f"cannot read --csv {missing}" in out.stderr and "Traceback" not in out.stderr
