"""Every command the docs show in a shell block is run here, or is listed with the reason it cannot be.

The commands are read from the fenced ``bash``/``sh`` blocks of the README, docs/, bench/ and the examples'
and provider's READMEs (continuation lines joined, comments cut). Each must match exactly one rule of
:data:`RULES`: run it (the offline preview in this process, with the exit status the doc's own comment gives,
``# exit 1``), or a reason it does not run here. A command no rule matches fails the test, and so does a rule
no command matches any more, so a new command in the docs gets a line here.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from gke_ray_tpu.stack import preview
from tests.conftest import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")), REPO_ROOT / "bench" / "README.md",
         *sorted((REPO_ROOT / "examples").glob("*/README.md")), REPO_ROOT / "provider" / "README.md"]
PREVIEW = "run: the offline preview, in this process"
RULES: list[tuple[str, str]] = [
    # (a regular expression the whole command matches, PREVIEW or why it does not run here)
    (r"(\.venv/bin/)?python -m gke_ray_tpu\.stack\.preview(?!.*--compile).*", PREVIEW),
    (r"\.venv/bin/python -m gke_ray_tpu\.stack\.preview .*--compile.*",
     "XLA's TPU compiler, minutes per slice count: tests/test_xla_check.py compiles the tiny preset with it"),
    (r"bin/setup && \.venv/bin/python -m pytest", "the suite itself, which this test is part of (.ci/run)"),
    (r"bin/setup && \.venv/bin/python -m gke_ray_tpu\.training\.submit --local",
     "the local run, minutes of MaxText on this machine's CPUs: tests/test_training_local_job.py runs it on a "
     "local head, tests/test_ray_auth_local.py starts the head the command starts"),
    (r"bin/setup && source \.venv/bin/activate", "sets up an interactive shell; bin/setup is what .ci/run runs first"),
    (r"pulumi .*", "the Pulumi CLI and a login, which this machine does not have (the program runs under the mock "
                   "engine here: tests/test_stack_dev.py)"),
    (r"gcloud .*", "gcloud and a Google Cloud project"),
    (r"bin/lock-worker-env( --exclude-newer \S+)?", "uv resolving against PyPI, about 10 s of network "
                                                    "(tests/test_worker_env.py checks the lock's header is the command "
                                                    "that wrote it; bench/bench_lock_reproduce.py runs it twice)"),
    (r"(\.venv/bin/)?python -m gke_ray_tpu\.training\.submit (--stack|--outputs-file) .*",
     "a deployed stack's cluster (tests/test_training_submit*.py run it against fake Kubernetes and Jobs APIs)"),
    (r"(\.venv/bin/)?python -m gke_ray_tpu\.training\.report (<run_name>|baseline-8b)( --json)?",
     "a run followed on this machine (tests/test_training_local_job.py reports one)"),
    (r"pip install .*git\+https://github\.com/<org>/.*", "a repository URL to fill in, and the network"),
    (r"python -m venv policy/venv && policy/venv/bin/pip install -r policy/requirements\.txt",
     "packages from the network (tests/test_policy_pack.py runs the pack with the suite's)"),
]
MODULES = sorted(set(re.findall(r"python -m (gke_ray_tpu[\w.]*)", "\n".join(page.read_text() for page in PAGES))))
"""The project's modules the docs run, each asked for ``--help`` too."""


def doc_commands() -> list[tuple[str, str, int]]:
    """(page, command, the exit status its comment names, else 0) of every line of the shell blocks."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", page.read_text(), flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                command, *comment = re.split(r"\s+#", line.strip(), maxsplit=1)
                if not command or command.startswith("#"):
                    continue
                status = re.match(r"\s*exit (\d+)", comment[0] if comment else "")
                found.append((str(page.relative_to(REPO_ROOT)), " ".join(command.split()),
                              int(status.group(1)) if status else 0))
    return found


COMMANDS = doc_commands()


def rule_of(command: str) -> list[str]:
    return [pattern for pattern, _ in RULES if re.fullmatch(pattern, command)]


def test_every_command_the_docs_show_has_exactly_one_rule_and_every_rule_a_command():
    assert COMMANDS
    unmatched = [f"{page}: {command}" for page, command, _ in COMMANDS if len(rule_of(command)) != 1]
    assert unmatched == [], "commands with no rule (or two) in tests/test_doc_commands.py RULES"
    used = {rule for _, command, _ in COMMANDS for rule in rule_of(command)}
    assert [pattern for pattern, _ in RULES if pattern not in used] == []


@pytest.mark.parametrize("page, command, status",
                         [c for c in COMMANDS if dict(RULES)[rule_of(c[1])[0]] == PREVIEW] if all(
                             len(rule_of(c[1])) == 1 for c in COMMANDS) else [], ids=str)
def test_each_preview_command_of_the_docs_runs_with_the_status_they_say(page, command, status, capsys):
    argv = shlex.split(command)
    assert preview.main(argv[argv.index("gke_ray_tpu.stack.preview") + 1:]) == status, capsys.readouterr().err
    if status == 0:  # every section, or the training one: it ends with what `pulumi up` starts
        assert "What the first `pulumi up` starts" in capsys.readouterr().out


@pytest.mark.parametrize("module", MODULES)
def test_each_module_the_docs_run_answers_help(module):
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("usage: "), done.stderr[-2000:]
