"""conftest's lab_run: a lab run that ztest ended on a failure of its own (ztest_lived) runs again,
at most LAB_ATTEMPTS times in all, each retry a warning; nothing else is retried."""
from __future__ import annotations

import pytest

from conftest import LAB_ATTEMPTS, ZtestFailed, lab_run, ztest_lived

ABORTED = ("zfsobs: recorded 5010 events (313 txgs, 0 malformed, 0 lost) in 30.7 s to x.cap (189197 bytes); "
           "stopped: ztest exited with status 3: child died with signal 6; its log: /var/tmp/zfsobs-ztest-1.log")


def test_ztest_lived_names_the_failure_and_passes_a_clean_end():
    ztest_lived("zfsobs: stopped: the lab's ztest run ended", "", None)
    with pytest.raises(ZtestFailed, match=r"^ztest exited with status 3: child died with signal 6; its log: "):
        ztest_lived("", ABORTED)
    with pytest.raises(ZtestFailed, match=r"^ztest ran 131 s past its 25 s run, stopped"):
        ztest_lived("zfsobs: stopped: ztest ran 131 s past its 25 s run, stopped (its pass's last operation ran on)")


def test_a_plain_run_is_retried_with_an_empty_tmp_path_and_warned(tmp_path):
    calls = []

    @lab_run
    def run(tmp_path):
        calls.append(sorted(p.name for p in tmp_path.iterdir()))
        (tmp_path / "x.cap").write_text("half")
        (tmp_path / "raw").mkdir()
        if len(calls) < 2:
            ztest_lived(ABORTED)
        return "done"

    with pytest.warns(UserWarning, match=r"run: the lab's ztest exited with status 3.*attempt 2 of 3"):
        assert run(tmp_path=tmp_path) == "done"
    assert calls == [[], []]


def test_the_last_failure_is_raised_and_other_errors_are_not_retried():
    calls = []

    @lab_run
    def always():
        calls.append(1)
        ztest_lived(ABORTED)

    with pytest.warns(UserWarning), pytest.raises(ZtestFailed):
        always()
    assert len(calls) == LAB_ATTEMPTS

    @lab_run
    def broken():
        calls.append(2)
        raise AssertionError("ours")

    with pytest.raises(AssertionError, match="ours"):
        broken()
    assert calls.count(2) == 1


def test_a_check_that_failed_because_ztest_ended_the_run_is_retried():
    calls = []

    @lab_run
    def run():
        calls.append(1)
        assert len(calls) > 1, ABORTED         # e.g. "zfsobs ended early" with zfsobs's stderr
        return "done"

    with pytest.warns(UserWarning, match=r"run: the lab's ztest exited with status 3.*attempt 2 of 3"):
        assert run() == "done"
    assert len(calls) == 2


def test_a_generator_fixture_is_retried_up_to_its_yield_and_torn_down_once():
    log = []

    @lab_run
    def fixture():
        n = log.count("setup") + 1
        log.append("setup")
        try:
            if n == 1:
                ztest_lived(ABORTED)
            yield n
        finally:
            log.append(f"teardown {n}")

    with pytest.warns(UserWarning):
        gen = fixture()
        assert next(gen) == 2
    assert next(gen, None) is None
    assert log == ["setup", "teardown 1", "setup", "teardown 2"]
