"""The final tree of an image, once every layer is read: links resolved inside the image, one record per
visible device-code file (each physical file once, under its own path), sorted as a scan of the
unpacked tree lists them, and the records of what could not be read (unsafe names, bad layers)."""

from __future__ import annotations

from collections import deque

from probe.arch.image.envs import Environments
from probe.arch.image.layers import DIRECTORY, HARDLINK, REGULAR, SYMLINK, Blob
from probe.arch.image.reader import MAX_SYMLINK_HOPS, LayerIndex, Upper, is_device_name
from probe.arch.limits import MAX_PATH, MAX_PATH_DEPTH
from probe.arch.records import FileRecord


class _Unresolved(Exception):
    pass


def resolve(path: str, upper: Upper) -> str:
    """Follow symlinks (and hard links) of the final tree; the image root is ``/`` for them."""
    out: list[str] = []
    queue = deque(path.split("/"))
    hops = 0
    while queue:
        part = queue.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if out:
                out.pop()
            continue
        cur = "/".join([*out, part])
        t = upper.types.get(cur)
        if t in (SYMLINK, HARDLINK):
            hops += 1
            if hops > MAX_SYMLINK_HOPS:
                raise _Unresolved("symlink loop")
            target = upper.links.get(cur, "")
            if len(target) > MAX_PATH:
                raise _Unresolved(f"link target longer than {MAX_PATH} bytes")
            if t == HARDLINK or target.startswith("/"):
                out = []  # hard link names are archive paths: from the root too
            queue.extendleft(reversed(target.split("/")))
            continue
        if t is not None and t != DIRECTORY and queue and any(q not in ("", ".") for q in queue):
            raise _Unresolved("not a directory")
        out.append(part)
    return "/".join(out)


def _walk_key(path: str) -> tuple[tuple[int, str], ...]:
    """The order a scan of the unpacked tree lists files: per folder, files first, then subfolders,
    each sorted by name."""
    parts = path.split("/")
    return (*((1, p) for p in parts[:-1]), (0, parts[-1]))


def final_records(
    indexes: list[LayerIndex], upper: Upper, prefix: str, blobs: list[Blob]
) -> tuple[list[FileRecord], Environments]:
    """One record per visible device-code file (symlinks and hard links resolved), sorted as a
    scan of the unpacked tree lists them; the environments with their distributions."""
    envs = Environments()
    recs: dict[str, FileRecord] = {}
    extra: list[FileRecord] = []
    for path, n in upper.layer_of.items():
        idx = indexes[n]
        t = upper.types[path]
        if t == REGULAR:
            envs.add_path(path)
            if path in idx.dist:
                envs.add_record(path, idx.dist[path])
            if path in idx.records:
                recs[path] = idx.records[path]
        elif t in (SYMLINK, HARDLINK) and is_device_name(path):
            try:
                target = resolve(path, upper)
            except _Unresolved as exc:
                extra.append(FileRecord(path=path, error=str(exc)))
                continue
            tt = upper.types.get(target)
            if tt is None:
                extra.append(FileRecord(path=path, error="file vanished or does not exist"))
            elif tt == REGULAR and not (
                is_device_name(target) and target in indexes[upper.layer_of[target]].records
            ):
                extra.append(FileRecord(path=path, error=f"link to /{target}, which was not read"))
    out = list(recs.values()) + extra
    for r in out:
        r.package = envs.package_of(r.path)
        r.package_version = envs.version_of(r.path, r.package)
        r.path = f"{prefix}!/{r.path}"
    out.sort(key=lambda r: _walk_key(r.path.split("!/", 1)[1]))
    for n, idx in enumerate(indexes):
        for name in idx.unsafe:
            why = (
                "member name leaves the image root (..)"
                if ".." in name.split("/")
                else f"member name longer than {MAX_PATH} bytes or {MAX_PATH_DEPTH} folders deep"
            )
            out.append(FileRecord(path=f"{prefix}!{name}", error=f"{why}: not read"))
        if idx.error:
            name = blobs[n].digest or f"layer-{n}"
            out.append(FileRecord(path=f"{prefix}!{name}", error=f"layer {n} of {len(blobs)}: {idx.error}"))
    return out, envs
