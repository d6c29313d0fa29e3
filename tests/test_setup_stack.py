"""`make setup` chooses the stack from the system (scripts/setup_venv.sh), or says what to install.

The systems are played by stand-ins on PATH: `getconf` answers the glibc version, `uname` the
machine, `OS_RELEASE` names the distribution, and each `python3.x` is a small script that answers the
three questions setup asks an interpreter (its version, whether it has venv with ensurepip, where its
headers are) the way that interpreter would. Nothing else of the machine is on PATH, so the real
interpreters here cannot leak into the choice. The real installs are CI's: the tfx-1.16 stack on this
Debian 12 machine, the tfx-1.21 stack in a Debian 13 root (.ci/run).
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT

SCRIPT = PROJECT_ROOT / "scripts" / "setup_venv.sh"
TOOLS = ("bash", "sh", "awk", "sort", "head", "ls", "cat", "rm", "dirname", "tr", "mkdir", "env", "chmod")

OS_RELEASES = {
    "debian13": 'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nID=debian\nVERSION_ID="13"\n',
    "debian12": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n',
    "ubuntu2204": 'PRETTY_NAME="Ubuntu 22.04.5 LTS"\nID=ubuntu\nVERSION_ID="22.04"\n',
}


def _python_stub(path: Path, version: str, *, venv: bool = True, headers: Path | None = None,
                 pip_fails: bool = False, venv_fails: bool = False) -> None:
    """An interpreter that answers setup's questions as Python `version` would; `-m venv DIR` makes a
    venv whose python is a stub of the same kind (its pip install fails when `pip_fails`), or, when
    `venv_fails`, stops half-way as venv does when ensurepip fails."""
    include = headers or path.parent
    venv_python = ("#!/bin/bash\\necho ERROR: no network >&2\\nexit 1\\n" if pip_fails
                   else "#!/bin/bash\\nexit 0\\n")
    path.write_text(f"""#!/bin/bash
case "$*" in
  *sys.version_info*) echo {version} ;;
  *"import venv, ensurepip"*) exit {0 if venv else 1} ;;
  *sysconfig*) echo {include} ;;
  "-m venv "*) mkdir -p "$3/bin" && {"exit 1" if venv_fails else ":"} && printf '{venv_python}' > "$3/bin/python" \
      && chmod +x "$3/bin/python" ;;
  *) exit 0 ;;
esac
""")
    path.chmod(0o755)


@pytest.fixture
def system(tmp_path):
    """A stand-in system: returns a function that runs setup on it and gives (exit code, output)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        os.symlink(shutil.which(tool), bin_dir / tool)
    headers = tmp_path / "include"
    headers.mkdir()
    (headers / "Python.h").write_text("")

    def run(*, glibc="2.41", machine="x86_64", release="debian13", pythons=(), compiler=True,
            args=None, extra_env=None):
        for tool, answer in (("getconf", f"glibc {glibc}"), ("uname", machine)):
            script = bin_dir / tool
            if tool == "uname":
                answer = f'case "$1" in -m) echo {machine} ;; -s) echo Linux ;; *) echo Linux 6.1 ;; esac'
                script.write_text(f"#!/bin/bash\n{answer}\n")
            else:
                script.write_text(f"#!/bin/bash\necho {answer}\n")
            script.chmod(0o755)
        gxx = bin_dir / "g++"
        if compiler:
            gxx.write_text("#!/bin/bash\n")
            gxx.chmod(0o755)
        elif gxx.exists():
            gxx.unlink()
        for name, version, options in pythons:
            _python_stub(bin_dir / name, version, headers=headers if options.get("headers", True) else tmp_path,
                         venv=options.get("venv", True), pip_fails=options.get("pip_fails", False),
                         venv_fails=options.get("venv_fails", False))
        (tmp_path / "os-release").write_text(OS_RELEASES[release])
        env = {"PATH": str(bin_dir), "HOME": str(tmp_path / "home"), "OS_RELEASE": str(tmp_path / "os-release"),
               **(extra_env or {})}
        args = ("--dry-run", str(tmp_path / "venv")) if args is None else args  # not the project's .venv
        done = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout + done.stderr

    return run


def test_debian_13_gets_the_newer_stack_on_the_systems_own_python(system):
    code, out = system(pythons=[("python3", "3.13", {})])
    assert code == 0, out
    assert "Stack: tfx-1.21 (TFX 1.21) on Python 3.13" in out and "glibc 2.41" in out
    assert "constraints/tfx-1.21.txt" in out


def test_an_older_glibc_gets_the_older_stack_on_python_310(system):
    code, out = system(glibc="2.36", release="debian12",
                       pythons=[("python3", "3.11", {}), ("python3.10", "3.10", {})])
    assert code == 0, out
    assert "Stack: tfx-1.16 (TFX 1.16) on Python 3.10" in out


def test_python_310_on_a_new_system_gets_the_older_stack(system):
    """tfx-1.21's packages have left Python 3.10: there it is tfx-1.16, whatever the glibc."""
    code, out = system(pythons=[("python3", "3.10", {})])
    assert code == 0, out
    assert "Stack: tfx-1.16 (TFX 1.16) on Python 3.10" in out


def test_the_newer_glibc_prefers_the_newer_stack_even_with_a_python_310_at_hand(system):
    code, out = system(pythons=[("python3.10", "3.10", {}), ("python3", "3.12", {})])
    assert code == 0, out
    assert "Stack: tfx-1.21 (TFX 1.21) on Python 3.12" in out


def test_stack_by_hand_takes_the_older_stack_on_a_new_system(system):
    code, out = system(pythons=[("python3", "3.13", {}), ("python3.10", "3.10", {})],
                       extra_env={"STACK": "tfx-1.16"})
    assert code == 0, out
    assert "Stack: tfx-1.16 (TFX 1.16) on Python 3.10" in out


def test_debian_12_without_python_310_names_what_that_system_can_install(system):
    code, out = system(glibc="2.36", release="debian12", pythons=[("python3", "3.11", {})])
    assert code == 1
    assert "Debian GNU/Linux 12 (bookworm) (x86_64, glibc 2.36)" in out
    assert "(3.11)" in out  # what it found
    assert "pyenv install 3.10" in out and "Debian 13 or Ubuntu 24.04" in out
    assert "python3.10-venv" not in out  # Debian 12 has no such package


def test_ubuntu_2204_without_python_310_is_told_its_own_package(system):
    code, out = system(glibc="2.35", release="ubuntu2204", pythons=[("python3", "3.11", {})])
    assert code == 1
    assert "apt-get install python3.10-venv" in out


def test_python_314_only_is_refused_with_the_versions_that_work(system):
    code, out = system(pythons=[("python3", "3.14", {})])
    assert code == 1
    assert "(3.14)" in out and "Python 3.11-3.13" in out
    assert "apt-get install python3 python3-venv" in out


def test_a_python_without_venv_names_the_venv_package(system):
    code, out = system(pythons=[("python3", "3.13", {"venv": False})])
    assert code == 1
    assert "no venv module with pip" in out and "python3-venv" in out


def test_no_compiler_names_gxx_and_why(system):
    code, out = system(pythons=[("python3", "3.13", {"headers": False})], compiler=False)
    assert code == 1
    assert "a C++ compiler (g++) and Python's headers" in out and "pyfarmhash" in out
    assert "apt-get install g++ python3-dev" in out


def test_a_machine_without_wheels_is_refused_before_anything_else(system):
    code, out = system(machine="aarch64", pythons=[("python3", "3.13", {})])
    assert code == 1
    assert "Linux on aarch64 is not supported" in out and "x86_64" in out


def test_python_by_hand_that_no_stack_takes_is_refused(system, tmp_path):
    code, out = system(glibc="2.36", release="debian12", pythons=[("python3.12", "3.12", {})],
                       extra_env={"PYTHON": str(tmp_path / "bin" / "python3.12")})
    assert code == 1
    assert "is Python 3.12, which no stack of this project runs on this system (glibc 2.36)" in out


def test_an_existing_venv_keeps_its_stack_unless_told(system, tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    _python_stub(venv / "bin" / "python", "3.10")
    (venv / ".stack").write_text("tfx-1.16\n")
    pythons = [("python3", "3.13", {}), ("python3.10", "3.10", {})]
    code, out = system(pythons=pythons)
    assert code == 0 and "Stack: tfx-1.16 (TFX 1.16) on Python 3.10" in out, out
    code, out = system(pythons=pythons, extra_env={"STACK": "tfx-1.21"})
    assert code == 0 and "Stack: tfx-1.21 (TFX 1.21) on Python 3.13" in out, out


def test_a_failed_install_leaves_no_half_made_venv(system, tmp_path):
    venv = tmp_path / "venv"
    code, out = system(pythons=[("python3", "3.13", {"pip_fails": True})], args=(str(venv),))
    assert code != 0
    assert "Stack: tfx-1.21" in out
    assert "removed the half-made" in out
    assert not venv.exists()


def test_a_venv_that_fails_half_way_is_removed(system, tmp_path):
    venv = tmp_path / "venv"
    code, out = system(pythons=[("python3", "3.13", {"venv_fails": True})], args=(str(venv),))
    assert code != 0
    assert "removed the half-made" in out
    assert not venv.exists()


def test_the_ci_split_names_test_files_that_exist_and_runs_each_on_a_stack():
    """A file named in BOTH_STACKS or NEWER_SHARE that does not exist (a typo, a rename) would move a
    whole file to the other stack without a word."""
    import conftest

    files = {path.name for path in (PROJECT_ROOT / "tests").glob("test_*.py")}
    assert conftest.BOTH_STACKS <= files, sorted(conftest.BOTH_STACKS - files)
    assert conftest.NEWER_SHARE <= files, sorted(conftest.NEWER_SHARE - files)
    assert not conftest.BOTH_STACKS & conftest.NEWER_SHARE
    assert {"test_e2e_cnn.py", "test_e2e_seq2seq.py", "test_kubeflow_contract.py", "test_report.py"} <= \
        conftest.BOTH_STACKS
