"""The mutation audit's verdicts (scripts/mutation_outcome.py): only an assertion about
behaviour catches a mutant; a crash in a fixture's set-up or an unexpected exception does not."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from mutation_outcome import read_junit  # noqa: E402

CASES = '''
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("set-up")

def test_assert():
    assert 1 == 2

def test_did_not_raise():
    with pytest.raises(ValueError):
        pass

def test_other_error_inside_raises():
    with pytest.raises(ValueError):
        int([])

def test_message_mismatch():
    with pytest.raises(ValueError, match="expected"):
        raise ValueError("other")

def test_unexpected_exception():
    int([])

def test_fixture_setup(broken):
    pass

def test_passes():
    assert True
'''


def _run(tmp_path, source):
    (tmp_path / "test_cases.py").write_text(source)
    xml = tmp_path / "j.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=long",
                    f"--junitxml={xml}", "test_cases.py"], cwd=tmp_path, capture_output=True,
                   timeout=120)
    return read_junit(xml)


def test_assertions_catch_and_crashes_do_not(tmp_path):
    out = _run(tmp_path, CASES)
    caught = sorted(a.split(":")[2] for a in out.asserted)
    crashed = sorted(c.split("::")[1].split(":")[0] for c in out.crashed)
    assert caught == ["test_assert", "test_did_not_raise", "test_message_mismatch",
                      "test_other_error_inside_raises"]
    assert crashed == ["test_fixture_setup", "test_unexpected_exception"]
    assert out.verdict == "caught"


def test_only_crashes_is_a_crash_and_no_xml_is_a_crash(tmp_path):
    out = _run(tmp_path, "import pytest\n\ndef test_c():\n    int([])\n")
    assert out.verdict == "crash" and not out.asserted
    assert read_junit(tmp_path / "missing.xml").verdict == "crash"


def test_all_passing_survives(tmp_path):
    assert _run(tmp_path, "def test_ok():\n    assert True\n").verdict == "survived"
