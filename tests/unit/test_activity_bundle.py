"""An activity bundle: the path and size rules a tenant's upload must meet, each a one-line
ValueError, and a digest that names the code (same code, same digest; any change, another)."""

from __future__ import annotations

import pytest

from tenantry.activities.code.bundle import MAX_BUNDLE_BYTES, MAX_FILES, Bundle

MAIN = b"def handle(value, context):\n    return value\n"


def test_a_valid_bundle_keeps_its_files_read_only_and_names_them_by_digest() -> None:
    bundle = Bundle({"main.py": MAIN, "lib/util.py": b"X = 1\n"}, "main.py:handle")
    assert bundle.digest.startswith("sha256:") and len(bundle.digest) == 7 + 64
    assert bundle.size == len(MAIN) + 6
    with pytest.raises(TypeError):
        bundle.files["main.py"] = b"changed"  # type: ignore[index]


def test_the_digest_is_canonical_and_sensitive_to_every_part() -> None:
    one = Bundle({"a.py": b"1", "main.py": MAIN}, "main.py:handle")
    same = Bundle({"main.py": MAIN, "a.py": b"1"}, "main.py:handle")  # another order
    assert one.digest == same.digest
    others = [
        Bundle({"a.py": b"2", "main.py": MAIN}, "main.py:handle"),  # contents
        Bundle({"b.py": b"1", "main.py": MAIN}, "main.py:handle"),  # a name
        Bundle({"a.py": b"1", "main.py": MAIN}, "main.py:other"),  # the entrypoint
        # Moving bytes between a name and contents must not collide.
        Bundle({"a.py1": b"", "main.py": MAIN}, "main.py:handle"),
    ]
    assert len({one.digest, *(b.digest for b in others)}) == 1 + len(others)


@pytest.mark.parametrize(("path", "problem"), [
    ("/etc/passwd", "must be relative"),
    ("../escape.py", "'..'"),
    ("a/../../b.py", "'..'"),
    ("a//b.py", "empty"),
    ("./a.py", "'.'"),
    ("a\\b.py", "backslash"),
    ("a\x00.py", "NUL"),
    ("", "non-empty"),
    ("x" * 300, "longer than"),
])
def test_paths_that_could_leave_the_bundle_are_refused(path: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Bundle({"main.py": MAIN, path: b""}, "main.py:handle")


@pytest.mark.parametrize(("entrypoint", "problem"), [
    ("missing.py:handle", "not a file of the bundle"),
    ("main.py", "must look like"),
    ("main.py:not-a-name", "must look like"),
    ("main.txt:handle", "must look like"),
    ("my-lib/main.py:handle", "not an importable module path"),
])
def test_the_entrypoint_must_be_an_importable_function_of_the_bundle(
    entrypoint: str, problem: str,
) -> None:
    files = {"main.py": MAIN, "main.txt": b"", "my-lib/main.py": MAIN}
    with pytest.raises(ValueError, match=problem):
        Bundle(files, entrypoint)


def test_size_and_count_limits() -> None:
    with pytest.raises(ValueError, match="at most"):
        Bundle({"main.py": MAIN, "big.bin": b"x" * MAX_BUNDLE_BYTES}, "main.py:handle")
    many = {f"f{i}.py": b"" for i in range(MAX_FILES)}
    with pytest.raises(ValueError, match=f"at most {MAX_FILES} files"):
        Bundle({"main.py": MAIN, **many}, "main.py:handle")
    with pytest.raises(ValueError, match="at least one file"):
        Bundle({}, "main.py:handle")


def test_a_path_cannot_be_a_file_and_a_folder() -> None:
    with pytest.raises(ValueError, match="a file and a folder"):
        Bundle({"main.py": MAIN, "lib": b"", "lib/x.py": b""}, "main.py:handle")


def test_contents_must_be_bytes() -> None:
    with pytest.raises(ValueError, match="must be bytes"):
        Bundle({"main.py": "text"}, "main.py:handle")  # type: ignore[dict-item]
