from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from sift_bench.arms import arm as arms
from sift_bench.arms.arm import (
    ArmError,
    archive_commit,
    build_manifest,
    changed_files,
    check_rev_imports,
    hash_tree,
    prepare_rev_arm,
    resolve_commit,
    tree_digest,
    verify_manifest,
)

GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(repo.parent)}
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    commit(
        root,
        {
            "server/src/sift_server/__init__.py": "VERSION = 'one'\n",
            "server/src/sift_server/engine/policy.py": "NAME = 'adaptive'\n",
            "README.md": "hello\n",
        },
        "first",
    )
    return root


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_manifest_records_commit_tree_and_every_file_hash(repo: Path, tmp_path: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    arm = prepare_rev_arm(repo, "main", "adaptive", tmp_path / "revs")
    assert arm.name == "rev:main"
    assert arm.kind == "rev" and arm.policy == "adaptive"
    assert arm.commit == head
    assert arm.folder is not None and arm.manifest is not None
    assert arm.pythonpath == arm.folder / "server" / "src"
    manifest = arm.manifest
    assert manifest["ref"] == "main"
    assert manifest["commit"] == head
    assert manifest["tree"] == git(repo, "rev-parse", "HEAD^{tree}")
    assert manifest["ref_moved_to"] is None
    assert manifest["files"] == {
        "README.md": sha("hello\n"),
        "server/src/sift_server/__init__.py": sha("VERSION = 'one'\n"),
        "server/src/sift_server/engine/policy.py": sha("NAME = 'adaptive'\n"),
    }
    assert manifest["digest"] == tree_digest(manifest["files"])
    assert verify_manifest(manifest, arm.folder) == []


def test_a_branch_moving_during_preparation_does_not_change_the_record(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = git(repo, "rev-parse", "HEAD")
    real_archive = arms.archive_commit
    moved: list[str] = []

    def archive_while_someone_commits(repo_: Path, commit_id: str, dest: Path) -> None:
        moved.append(commit(repo, {"server/src/sift_server/__init__.py": "VERSION = 'two'\n"}, "second"))
        real_archive(repo_, commit_id, dest)

    monkeypatch.setattr(arms, "archive_commit", archive_while_someone_commits)
    arm = prepare_rev_arm(repo, "main", "timed", tmp_path / "revs")
    assert arm.commit == first
    assert arm.manifest is not None and arm.folder is not None
    assert arm.manifest["commit"] == first
    assert arm.manifest["ref_moved_to"] == moved[0] != first
    assert (arm.folder / "server/src/sift_server/__init__.py").read_text() == "VERSION = 'one'\n"
    assert arm.manifest["files"]["server/src/sift_server/__init__.py"] == sha("VERSION = 'one'\n")
    assert verify_manifest(arm.manifest, arm.folder) == []


def test_verify_manifest_finds_changed_missing_and_added_files(repo: Path, tmp_path: Path) -> None:
    arm = prepare_rev_arm(repo, "HEAD", "adaptive", tmp_path / "revs")
    assert arm.folder is not None and arm.manifest is not None
    (arm.folder / "README.md").write_text("tampered\n")
    (arm.folder / "server/src/sift_server/engine/policy.py").unlink()
    (arm.folder / "extra.txt").write_text("x")
    # Caches are not part of the code.
    (arm.folder / "server/src/sift_server/__pycache__").mkdir()
    (arm.folder / "server/src/sift_server/__pycache__/x.cpython-311.pyc").write_bytes(b"\0")
    assert verify_manifest(arm.manifest, arm.folder) == [
        "changed: README.md",
        "missing: server/src/sift_server/engine/policy.py",
        "added: extra.txt",
    ]


def test_resolve_and_archive_a_commit_id(repo: Path, tmp_path: Path) -> None:
    first = resolve_commit(repo, "main")
    commit(repo, {"README.md": "changed\n"}, "second")
    assert resolve_commit(repo, "main") != first
    assert resolve_commit(repo, "main~1") == first
    archive_commit(repo, first, tmp_path / "out")
    assert (tmp_path / "out/README.md").read_text() == "hello\n"
    manifest = build_manifest(repo, "main~1", first, tmp_path / "out")
    assert manifest["files"] == hash_tree(tmp_path / "out")


def test_unknown_revision_and_revision_without_a_server(repo: Path, tmp_path: Path) -> None:
    with pytest.raises(ArmError, match="unknown revision"):
        prepare_rev_arm(repo, "no-such-branch", "adaptive", tmp_path / "revs")
    with pytest.raises(ArmError):
        resolve_commit(repo, "--all")
    git(repo, "rm", "-q", "-r", "server")
    git(repo, "commit", "-q", "-m", "no server")
    with pytest.raises(ArmError, match="no server/src/sift_server"):
        prepare_rev_arm(repo, "HEAD", "adaptive", tmp_path / "revs")


def test_the_revision_shadows_the_installed_server(repo: Path, tmp_path: Path) -> None:
    arm = prepare_rev_arm(repo, "main", "adaptive", tmp_path / "revs")
    assert arm.pythonpath is not None
    where = check_rev_imports(arm)
    assert Path(where).resolve() == (arm.pythonpath / "sift_server" / "__init__.py").resolve()


def test_a_revision_runs_once_per_backend_from_one_folder(repo: Path, tmp_path: Path) -> None:
    from sift_bench.arms.arm import rev_backend_arms

    arm = prepare_rev_arm(repo, "main", "adaptive", tmp_path / "revs")
    torch_arm, auto_arm = rev_backend_arms(arm, ["torch", "auto:fp32", "torch"])
    assert (torch_arm.name, auto_arm.name) == ("rev:main/torch", "rev:main/auto:fp32")
    assert torch_arm.server_args == ["--backend", "torch:fp32"] and auto_arm.server_args == ["--backend", "auto:fp32"]
    assert torch_arm.folder == auto_arm.folder == arm.folder and torch_arm.commit == arm.commit
    assert rev_backend_arms(arm, []) == [arm]
    with pytest.raises(ArmError, match="not a backend"):
        rev_backend_arms(arm, ["tensorrt"])


def test_changed_files() -> None:
    assert changed_files({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"}) == ["b", "c"]
    assert changed_files({"a": "1"}, {}) == ["a"]


def test_hash_tree_can_leave_out_top_level_folders(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench/x.py").write_text("x")
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine/bench.py").write_text("y")
    assert set(hash_tree(tmp_path)) == {"bench/x.py", "engine/bench.py"}
    assert set(hash_tree(tmp_path, ("bench",))) == {"engine/bench.py"}
