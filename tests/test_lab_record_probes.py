"""record --probes: the capture holds the named probes and txg (the backbone), nothing else, on the
real libzpool lab (scripts/kernel-bench --peer records zil.bt this way beside bcc's zfsdist)."""
import subprocess
import sys

import pytest

from conftest import lab_ready, lab_run
from zfsobs.capture.reader import read_capture

pytestmark = [pytest.mark.lab, pytest.mark.skipif(bool(lab_ready()), reason=lab_ready() or "ok")]


@lab_run
def test_record_probes_zil_records_txg_and_zil_only(tmp_path):
    cap = tmp_path / "zil.cap"
    done = subprocess.run([sys.executable, "-m", "zfsobs", "record", "--lab", "--probes", "zil", "--duration", "3",
                           "-O", str(cap)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    capture = read_capture(str(cap))
    assert list(capture.meta["probes"]) == ["txg", "zil"]
