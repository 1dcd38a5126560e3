"""The CPU kernels' builder (engines/cpu_kernels.py): one build per source, header, compiler and
CPU, reused from `$ARENA_CACHE_DIR/kernels/`; an edit to the shared header rebuilds every kernel
that includes it; a source that does not compile raises the compiler's own message, which
`library()` turns into torch's ops."""

from __future__ import annotations

import ctypes
import shutil

import pytest

from arena_core.engines import cpu_kernels

CC = cpu_kernels._compiler()
if CC is None:
    pytest.skip("no C compiler on this machine", allow_module_level=True)


def _sources(tmp_path):
    src = tmp_path / "csrc"
    src.mkdir()
    shutil.copy(cpu_kernels.CSRC / "simd.h", src / "simd.h")
    (src / "twice.c").write_text('#include "simd.h"\nint arena_twice(int x) { return 2 * x; }\n')
    return src


def test_a_kernel_builds_once_and_a_header_edit_rebuilds_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ARENA_CACHE_DIR", str(tmp_path / "cache"))
    src = _sources(tmp_path)
    first = cpu_kernels._build(CC, src / "twice.c")
    assert first.parent == tmp_path / "cache" / "kernels" and first.name.startswith("twice-")
    assert ctypes.CDLL(str(first)).arena_twice(21) == 42
    stamp = first.stat().st_mtime_ns
    assert cpu_kernels._build(CC, src / "twice.c") == first  # reused, not rebuilt
    assert first.stat().st_mtime_ns == stamp
    (src / "simd.h").write_text((src / "simd.h").read_text() + "/* edited */\n")
    second = cpu_kernels._build(CC, src / "twice.c")
    assert second != first and second.is_file()


def test_a_source_that_does_not_compile_says_why(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ARENA_CACHE_DIR", str(tmp_path / "cache"))
    src = _sources(tmp_path)
    (src / "broken.c").write_text("int arena_broken(void) { return missing; }\n")
    with pytest.raises(RuntimeError, match="missing"):
        cpu_kernels._build(CC, src / "broken.c")
    assert not list((tmp_path / "cache" / "kernels").glob("broken-*"))  # nothing half-written
