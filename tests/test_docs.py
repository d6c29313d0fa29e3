"""The documentation: the site builds strictly (broken links and anchors fail), generated pages are fresh,
the README stays short and points into the site.

CI runs this from a clean clone, so `make setup` installs MkDocs (the `docs` extra of setup.py).
"""
import os
import re
import shutil
import subprocess
import sys

from conftest import PROJECT_ROOT

README_LIMIT = 12_000  # characters: what it is, the two commands, own data, Kubeflow, metrics, links


def _build(config_dir, site_dir) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
                          cwd=config_dir, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_site_builds_strictly_without_a_warning(tmp_path):
    built = _build(PROJECT_ROOT, tmp_path / "site")
    log = built.stdout + built.stderr
    assert built.returncode == 0, log[-4000:]
    assert "WARNING" not in log, log[-4000:]
    cli = (tmp_path / "site" / "cli" / "index.html").read_text()
    assert "--epochs" in cli and "--pipeline-root" in cli and "--schedule" in cli
    assert (tmp_path / "site" / "tour" / "2-report.png").is_file()


def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    """The validation settings in mkdocs.yml make a dead link an error, not a log line."""
    shutil.copy(PROJECT_ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(PROJECT_ROOT / "docs", tmp_path / "docs")
    with open(tmp_path / "docs" / "index.md", "a") as page:
        page.write("\n[gone](guide/images.md#no-such-section) and [missing](guide/no-such-page.md)\n")
    built = _build(tmp_path, tmp_path / "site")
    log = built.stdout + built.stderr
    assert built.returncode != 0
    assert "no-such-section" in log and "no-such-page.md" in log


def test_the_cli_reference_is_the_parser():
    written = (PROJECT_ROOT / "docs" / "cli.md").read_text()
    generated = subprocess.run([sys.executable, "scripts/write_cli_reference.py", "--print"], cwd=PROJECT_ROOT,
                               capture_output=True, text=True, check=True).stdout
    assert written == generated, "docs/cli.md is stale: run .venv/bin/python scripts/write_cli_reference.py"
    for heading in ("## run", "## compile", "## deploy", "## predict", "## report", "## tensorboard"):
        assert f"\n{heading}\n" in written, heading


def test_the_readme_is_short_and_its_links_lead_somewhere():
    readme = (PROJECT_ROOT / "README.md").read_text()
    assert len(readme) <= README_LIMIT, f"README.md has {len(readme)} characters; move detail into docs/"
    assert "── Run summary: cnn-pipeline" in readme and "Blessed: yes" in readme   # what a default run prints
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", readme) if "://" not in t]
    assert any(t.startswith("docs/") for t in targets)
    missing = [t for t in targets if t and not (PROJECT_ROOT / t).exists()]
    assert not missing, missing
