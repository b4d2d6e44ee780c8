"""Kills a run with SIGKILL in its second verification and asks `sparseditto resume --abort` to end it, N times:
counts how often resume wrongly said the run had finished (the checkpoint race of session 8, bench/NOTES.md).
`python3 bench/kill_resume_race.py [N]`; load the CPU beside it to widen the window. No GPU."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = Path(__file__).resolve().parents[1] / "tests" / "slow_run_child.py"  # hangs in its second verification


def one(folder: Path) -> bool:
    """True when resume ended the killed run as it should."""
    marker, runs = folder / "verifying", folder / "runs"
    proc = subprocess.Popen([sys.executable, str(CHILD), str(marker), str(runs)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    for _ in range(2000):
        if marker.exists() or proc.poll() is not None:
            break
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    out = subprocess.run([sys.executable, "-m", "sparseditto.cli", "resume", "killed", "--abort", "--runs-dir", str(runs)],
                         capture_output=True, text=True)
    return "already finished" not in out.stdout + out.stderr


def main(n: int) -> None:
    wrong = 0
    for _ in range(n):
        with tempfile.TemporaryDirectory() as tmp:
            wrong += not one(Path(tmp))
    print(f"{n} kills: resume said 'already finished' {wrong} times")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
