"""A loopback imitation of the Hugging Face Hub and its CDN for the Python tests, the parts of
tests/hub_imitation (the Rust tests') that opening a model by link and a sweep ask for:

- ``/api/models/ORG/NAME/revision/REV[?blobs=true]``: the commit (``sha``) and the files
  (``siblings``; with ``blobs=true`` each safetensors file's LFS ``sha256``);
- ``/ORG/NAME/resolve/REV/FILE``: a weights file is a ``302`` to the CDN's signed URL with
  ``X-Repo-Commit``, ``X-Linked-Size`` and ``X-Linked-Etag``; a small file a ``307`` to
  ``/api/resolve-cache/models/ORG/NAME/COMMIT/FILE``; ``404`` with ``X-Error-Code``
  (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``);
- ``/files/ORG/NAME/COMMIT/FILE?signature=N``, the CDN: the file, ``206`` for one ``Range``.

Both origins share one port. Every request is logged with the body bytes sent, so a test can
count what was fetched of each commit. Point headprint at it with ``HF_ENDPOINT``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional
from urllib.parse import urlsplit


@dataclass
class Logged:
    path: str
    range: Optional[str]
    status: int
    sent: int


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def do_GET(self):  # noqa: N802 - the base class's name
        status, headers, body = self.server.hub.answer(self.path, self.headers.get("Range"))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True
        self.server.hub.record(Logged(self.path, self.headers.get("Range"), status, len(body)))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    hub: "HubImitation"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class HubImitation:
    def __init__(self) -> None:
        # repo -> {"refs": {revision: commit}, "commits": {commit: {file: bytes}}}
        self.repos: Dict[str, dict] = {}
        self._log: List[Logged] = []
        self._lock = threading.Lock()
        self._signed = 0
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.hub = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add_commit(self, repo: str, revision: str, files: Dict[str, bytes]) -> str:
        """Adds ``files`` as a commit of ``repo`` that the branch ``revision`` names; returns
        the commit (40 hex digits, distinct for each repository and revision)."""
        listing = "".join(f"{name}={len(data)};" for name, data in sorted(files.items()))
        commit = _sha256(f"{repo}@{revision}:{listing}".encode())[:40]
        with self._lock:
            entry = self.repos.setdefault(repo, {"refs": {}, "commits": {}})
            entry["refs"][revision] = commit
            entry["commits"][commit] = dict(files)
        return commit

    def record(self, entry: Logged) -> None:
        with self._lock:
            self._log.append(entry)

    def log(self) -> List[Logged]:
        with self._lock:
            return list(self._log)

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()

    def weight_bytes(self, commit: Optional[str] = None) -> int:
        """Body bytes the CDN sent of weights files (of ``commit``, or of any)."""
        return sum(
            entry.sent
            for entry in self.log()
            if entry.path.startswith("/files/") and ".safetensors" in entry.path
            and (commit is None or f"/{commit}/" in entry.path)
        )

    def weight_requests(self, commit: str) -> int:
        """Requests for ``commit``'s weights file, on either origin."""
        return sum(1 for entry in self.log() if f"/{commit}/" in entry.path and ".safetensors" in entry.path)

    # The answers.

    def _files(self, org: str, name: str, revision: str):
        """(commit, its files) of a repository's revision (a branch or a commit), or the error
        answer the Hub gives."""
        repo = self.repos.get(f"{org}/{name}")
        if repo is None:
            return None, _error(404, "RepoNotFound")
        commit = repo["refs"].get(revision, revision if revision in repo["commits"] else None)
        if commit is None:
            return None, _error(404, "RevisionNotFound")
        return commit, repo["commits"][commit]

    def answer(self, target: str, range_header: Optional[str]):
        parts = urlsplit(target)
        path, query = parts.path, parts.query
        with self._lock:
            if path.startswith("/api/models/"):
                return self._api(path[len("/api/models/"):], "blobs=true" in query.split("&"))
            if path.startswith("/api/resolve-cache/models/"):
                pieces = path[len("/api/resolve-cache/models/"):].split("/", 3)
                data = self._file(*pieces) if len(pieces) == 4 else None
                if data is None:
                    return _error(404, "EntryNotFound")
                status, headers, body = _ranged(data, range_header, f'"{_sha256(data)[:32]}"')
                return status, headers + [("X-Repo-Commit", pieces[2])], body
            if path.startswith("/files/"):
                pieces = path[len("/files/"):].split("/", 3)
                data = self._file(*pieces) if len(pieces) == 4 else None
                if data is None:
                    return 404, [], b"NoSuchKey"
                if not query.startswith("signature="):
                    return 403, [], b"AccessDenied"
                return _ranged(data, range_header, f'"cdn-{_sha256(data)[:16]}"')
            return self._resolve(path)

    def _file(self, org: str, name: str, commit: str, file: str) -> Optional[bytes]:
        repo = self.repos.get(f"{org}/{name}")
        return None if repo is None else repo["commits"].get(commit, {}).get(file)

    def _api(self, rest: str, blobs: bool):
        pieces = rest.split("/", 3)
        if len(pieces) != 4 or pieces[2] != "revision":
            return _error(404, "RepoNotFound")
        org, name, _, revision = pieces
        commit, files = self._files(org, name, revision)
        if commit is None:
            return files
        siblings = []
        for file, data in sorted(files.items()):
            entry: dict = {"rfilename": file}
            if blobs:
                entry["size"] = len(data)
                if file.endswith(".safetensors"):
                    entry["lfs"] = {"sha256": _sha256(data), "size": len(data), "pointerSize": 134}
            siblings.append(entry)
        body = json.dumps({"id": f"{org}/{name}", "sha": commit, "siblings": siblings}).encode()
        return 200, [("Content-Type", "application/json")], body

    def _resolve(self, path: str):
        pieces = path.lstrip("/").split("/", 4)
        if len(pieces) != 5 or pieces[2] != "resolve":
            return _error(404, "RepoNotFound")
        org, name, _, revision, file = pieces
        commit, files = self._files(org, name, revision)
        if commit is None:
            return files
        data = files.get(file)
        if data is None:
            status, headers, body = _error(404, "EntryNotFound")
            return status, headers + [("X-Repo-Commit", commit)], body
        etag = f'"{_sha256(data)[:32]}"'
        if file.endswith(".safetensors"):
            self._signed += 1
            location = f"{self.url}/files/{org}/{name}/{commit}/{file}?signature={self._signed}"
            headers = [("Location", location), ("X-Repo-Commit", commit), ("X-Linked-Size", str(len(data))),
                       ("X-Linked-Etag", etag), ("ETag", etag)]
            return 302, headers, b""
        location = f"/api/resolve-cache/models/{org}/{name}/{commit}/{file}"
        return 307, [("Location", location), ("X-Repo-Commit", commit), ("ETag", etag)], b""


def _error(status: int, code: str):
    return status, [("X-Error-Code", code)], code.encode()


def _ranged(data: bytes, range_header: Optional[str], etag: str):
    """A file as a static host answers it: one range (``bytes=a-b`` or ``bytes=a-``) or all."""
    headers = [("ETag", etag), ("Accept-Ranges", "bytes")]
    spec = (range_header or "").strip()
    if not spec.startswith("bytes=") or "," in spec:
        return 200, headers, data
    first_text, _, last_text = spec[len("bytes="):].partition("-")
    first = int(first_text)
    if first >= len(data):
        return 416, [("Content-Range", f"bytes */{len(data)}")], b""
    last = len(data) - 1 if not last_text.strip() else min(int(last_text), len(data) - 1)
    headers.append(("Content-Range", f"bytes {first}-{last}/{len(data)}"))
    return 206, headers, data[first : last + 1]


def with_zeroed_tensor(safetensors: bytes, tensor: str) -> bytes:
    """A safetensors file's bytes with ``tensor``'s data set to zero."""
    length = int.from_bytes(safetensors[:8], "little")
    header = json.loads(safetensors[8 : 8 + length])
    start, end = header[tensor]["data_offsets"]
    base = 8 + length
    return safetensors[: base + start] + bytes(end - start) + safetensors[base + end :]
