"""Every command the docs show in a shell block is run here, or is listed with the reason it cannot be.

The commands are read from the fenced ``bash``/``sh`` blocks of the README, docs/, bench/ and the examples'
and provider's READMEs (continuation lines joined, comments cut). Each must match exactly one rule of
:data:`RULES`: run it (the offline preview in this process, with the exit status the doc's own comment gives,
``# exit 1``), or a reason it does not run here. A command no rule matches fails the test, and so does a rule
no command matches any more, so a new command in the docs gets a line here.
"""

from __future__ import annotations

import functools
import importlib
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


@functools.cache
def help_of(module: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("module", MODULES)
def test_each_module_the_docs_run_answers_help(module):
    done = help_of(module)
    assert done.returncode == 0 and done.stdout.startswith("usage: "), done.stderr[-2000:]


# --- What the docs quote from the code -------------------------------------------------------------------------------

READ = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
"""The pages a person reads (bench/README.md is the benches' own guide; tests/test_bench_data.py holds its counts)."""


def inline_code(page) -> list[str]:
    """The page's inline code spans (`...`), outside its fenced blocks."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return re.findall(r"`([^`\n]+)`", text)


QUOTED = {page.relative_to(REPO_ROOT).as_posix(): inline_code(page) for page in READ}


def resolve(dotted: str):
    """The module, or the module's attribute, a dotted path names: the longest prefix that imports, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise ModuleNotFoundError(dotted)


def test_every_module_path_the_docs_quote_imports():
    quoted = sorted({(page, path) for page, spans in QUOTED.items() for span in spans
                     for path in re.findall(r"\bgke_ray_tpu(?:\.\w+)+", span)})
    assert len(quoted) > 20
    assert unresolved(quoted) == []


def unresolved(named) -> list[str]:
    """Each ``(where, dotted path)`` whose path does not import, with why."""
    missing = []
    for where, dotted in named:
        try:
            resolve(dotted)
        except (ImportError, AttributeError) as error:
            missing.append(f"{where}: {dotted} ({error})")
    return missing


ROOT_ENTRIES = {name.split("/")[0] for name in subprocess.run(
    ["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.split()}
"""The repository's own top-level files and folders (tracked), not what a run leaves there (local-runs/)."""


def defines(path, name: str) -> bool:
    """``path`` (a Python file) binds ``name`` at its top level: a def, a class or an assignment."""
    import ast

    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(target, ast.Name) and target.id == name for target in targets):
            return True
    return False


def test_every_repository_path_the_docs_quote_exists():
    """A quoted path whose first part is a file or folder of this repository (``core/prices.py``, ``tests/``,
    ``core/presets/*.yml``) exists; ``path.py:NAME`` and "`NAME` in `path.py`" name what that file defines."""
    checked, missing = 0, []
    for page, spans in QUOTED.items():
        text = (REPO_ROOT / page).read_text()
        for span in spans:
            word = span.split()[0]
            path, _, name = word.partition(":")
            if "/" not in path or path.split("/")[0] not in ROOT_ENTRIES or "<" in path:
                continue
            checked += 1
            found = sorted(REPO_ROOT.glob(path)) if "*" in path else [REPO_ROOT / path] if (REPO_ROOT / path).exists() else []
            if not found:
                missing.append(f"{page}: {word}")
            elif name and not defines(found[0], name):
                missing.append(f"{page}: {word} ({path} defines no {name})")
        for name, path in re.findall(r"`(\w+)` in `([\w/]+\.py)`", text):
            checked += 1
            if not re.search(rf"\b{name}\b", (REPO_ROOT / path).read_text()):
                missing.append(f"{page}: {name} in {path}")
    assert checked > 40 and missing == []


def test_every_config_key_the_docs_name_is_one_the_stack_reads_or_refuses():
    from gke_ray_tpu.stack.config import RETIRED_KEYS, StackConfig

    known = {field.alias for field in StackConfig.model_fields.values()} | set(RETIRED_KEYS)
    named = {f"gke-ray-tpu:{key}" for page in READ for key in re.findall(r"gke-ray-tpu:([A-Za-z]\w*)", page.read_text())}
    named -= {"gke-ray-tpu:index"}  # the components' type tokens, gke-ray-tpu:index:<Name>
    assert len(named) > 3 and sorted(named - known) == []


OTHER_TOOLS_FLAGS = {
    "--scale-down-unneeded-time": "the Kubernetes cluster autoscaler",
    "--enable-queued-provisioning": "gcloud container node-pools create",
    "--machine-type": "gcloud container node-pools create",
    "--attribute-condition": "gcloud iam workload-identity-pools providers create-oidc",
    "--require-hashes": "pip and uv", "--no-deps": "pip and uv", "--only-binary": "pip and uv",
    "--hash": "a pip and uv requirement line", "--logdir": "tensorboard",
    "--lose": "bench/bench_elastic_recovery.py", "--exclude-newer": "bin/lock-worker-env (uv's own flag)",
}
"""Flags the docs quote that belong to other tools, and which; libtpu's and XLA's are ``--xla_...`` and
``--megascale_...``."""


def test_every_flag_the_docs_quote_is_a_flag_of_the_commands_or_of_a_named_tool():
    flags = {flag for spans in QUOTED.values() for span in spans for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", span)}
    for page, command, _ in COMMANDS:
        if "gke_ray_tpu." in command and page in QUOTED:
            flags |= set(re.findall(r"(?<![\w-])--[a-z][\w-]*", command))
    ours = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", "\n".join(help_of(module).stdout for module in MODULES)))
    theirs = {flag for flag in flags if flag.startswith(("--xla_", "--megascale_"))} | set(OTHER_TOOLS_FLAGS)
    assert sorted(flags - ours - theirs) == []
    assert sorted(set(OTHER_TOOLS_FLAGS) - flags) == [], "a flag OTHER_TOOLS_FLAGS lists that no page quotes any more"


def test_the_stack_outputs_the_deploy_page_lists_are_the_stacks(dev_run):
    """deploy.md's "Stack outputs" names every output the program exports, and no other (outside parentheses,
    which describe them)."""
    deploy = (REPO_ROOT / "docs" / "deploy.md").read_text()
    section = deploy[deploy.index("## Stack outputs"):]
    section = section[:section.index("\n\n", section.index("`pulumi stack output"))]
    listed = set(re.findall(r"`([a-z][A-Za-z]*)`", re.sub(r"\([^()]*\)", "", section)))
    assert listed == set(dev_run.outputs)


POINTER = re.compile(r"""docs/([\w-]+\.md)(?:: '?|, (?:"\s*")?')([A-Za-z][\w' +-]*\w)""")
"""``docs/<page>.md: Words`` or ``docs/<page>.md, 'Words'`` (the quote may follow a string's end and a new line)."""


def test_every_docs_section_the_code_points_at_is_there():
    """Code that sends its reader to a page's section (``docs/queues.md: Elastic runs on their minimum``,
    ``docs/elastic.md, 'Moving checkpoints to a new bucket'``) names words the page holds."""
    from tests.conftest import source_files

    files = [*source_files(), REPO_ROOT / "__main__.py", *sorted((REPO_ROOT / "tests").glob("*.py")),
             *sorted((REPO_ROOT / "bench").glob("*.py"))]
    pointers = {(path.relative_to(REPO_ROOT).as_posix(), page, words) for path in files
                for page, words in re.findall(POINTER, path.read_text())}
    assert len(pointers) > 5
    missing = [f"{path}: docs/{page}: {words}" for path, page, words in sorted(pointers)
               if words.lower() not in " ".join((REPO_ROOT / "docs" / page).read_text().lower().split())]
    assert missing == []


def test_every_module_path_the_code_names_imports():
    """What the code's own docstrings and comments point at (``gke_ray_tpu.core.kueue_waiting.waiting_cost``, or
    ``core.kueue_waiting.waiting_cost`` quoted inside the namespace) is there: a module moved or renamed leaves no old path."""
    files = [path for path in REPO_ROOT.rglob("*.py") if path.parts[len(REPO_ROOT.parts)] in CODE_FOLDERS]
    named = sorted({(path.relative_to(REPO_ROOT), dotted if dotted.startswith("gke_ray_tpu.") else f"gke_ray_tpu.{dotted}")
                    for path in files for dotted in re.findall(
                        r"\bgke_ray_tpu(?:\.\w+)+|(?<=``)(?:core|components|preflight|stack|training)(?:\.\w+)+(?=``)",
                        path.read_text())})
    assert len(named) > 100
    assert unresolved(named) == []


CODE_FOLDERS = ("core", "components", "preflight", "stack", "training", "bench", "tests", "provider", "__main__.py")
