"""`synapse mcp`: serve the store to agents over the Model Context Protocol (mcp_server.py)."""
from __future__ import annotations

import ipaddress
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Optional

import typer

from . import output
from .common import QUIET_OPTION, store_path
from .exits import IOERR, NOINPUT, USAGE, UserError


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp)


def mcp(
    http: Optional[str] = typer.Option(
        None, "--http", metavar="HOST:PORT",
        help="Serve over streamable HTTP at http://HOST:PORT/mcp (several agents sharing one "
             "store) instead of stdio. HOST must be a loopback address unless --allow-remote."),
    allow_remote: bool = typer.Option(
        False, "--allow-remote",
        help="Allow a HOST other than loopback; needs --token-file."),
    token_file: Optional[Path] = typer.Option(
        None, "--token-file", metavar="FILE",
        help="Require `Authorization: Bearer <token>` on every HTTP request; FILE holds the "
             "token (one line, kept private: chmod 600)."),
    scope: Optional[str] = typer.Option(
        None, "--scope", metavar="TAG",
        help="Serve one user's memories only (TAG as NAMESPACE:VALUE, e.g. user:ana): "
             "remember adds TAG to every memory and refuses other tags of its namespace; recall, "
             "forget, pin, unpin, restore, memory_status and the resources see only memories "
             "carrying TAG; find_nodes and open_node see only the nodes carrying TAG "
             "(consolidation builds each user's nodes from that user's memories) and their "
             "links to memories carrying TAG."),
    json: bool = typer.Option(False, "--json", help="Accepted like every command's: the "
                                                    "protocol is JSON already."),
    quiet: bool = QUIET_OPTION,
) -> None:
    """Serve this store's memory to agents over the Model Context Protocol.

    Tools: remember, recall, forget, restore, pin, unpin, memory_status, find_nodes,
    open_node, consolidate. Resources: synapse://status, synapse://record/{id}. The store is
    fixed when the server starts (--store / $SYNAPSE_HOME); no tool can name another one.
    Over stdio (the default, how desktop clients launch it) stdout is the protocol and
    messages go to stderr. Stops on end of input, SIGINT or SIGTERM.

    Example: claude mcp add synapse -- synapse --store ~/agent-memory mcp
    Example: synapse mcp --http 127.0.0.1:8765
    Example: synapse mcp --scope user:ana
    """
    from .. import mcp_server

    if scope is not None:
        _check_scope(scope)
    path = store_path().resolve()
    address = _address(http, allow_remote, token_file) if http is not None else None
    if token_file is not None and address is None:
        raise UserError("--token-file applies to --http only (stdio has no network side)",
                        code=USAGE)
    token = _token(token_file) if token_file is not None else None
    if address is not None:
        _check_port(*address)
    # SIGTERM ends the server the way SIGINT does: no half-finished write survives either
    # (each commit is atomic), and the exit is quiet.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        mcp_server.serve(path, address, token, scope)
    except BaseException as exc:
        if not _interrupted(exc):
            raise
        output.warn("synapse mcp: stopped")
        if address is None:
            # The SDK's stdin reader thread is blocked in read() and is no daemon: Python would
            # wait for it until the client closes stdin, however long. serve() has waited for
            # the write in progress (Memory.close), and every commit is atomic: end here.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        return
    output.warn("synapse mcp: stopped")


def _check_scope(tag: str) -> None:
    """The scope is a tag remember adds to each memory: the rules of a tag in ingest's input."""
    from ..engine.inputs import InputError, check_tag

    try:
        check_tag(tag, "--scope")
    except InputError as exc:
        raise UserError(f"--scope {tag!r}: {exc.reason}", code=USAGE) from None
    name, _, value = tag.partition(":")
    if not (name.strip() and value.strip()):
        # the namespace is what keeps a client from tagging a memory with another user's
        # scope ("user:bob" on a server scoped to "user:ana" is refused)
        raise UserError(f"--scope {tag!r}: write a scope as NAMESPACE:VALUE, e.g. user:ana",
                        code=USAGE)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _interrupted(exc: BaseException) -> bool:
    """`exc` is, or comes from, a KeyboardInterrupt (Ctrl-C or SIGTERM): raised inside the
    SDK's task group it can come out as an ExceptionGroup of a RuntimeError ("Attempted to exit
    a cancel scope...") whose context is the interrupt."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, KeyboardInterrupt):
            return True
        todo += getattr(e, "exceptions", ())  # an exception group (3.11, or its backport)
        todo += [e.__context__, e.__cause__]
    return False


def _address(http: str, allow_remote: bool, token_file: Optional[Path]) -> tuple[str, int]:
    host, sep, port = http.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--http {http!r}: expected HOST:PORT, e.g. 127.0.0.1:8765", code=USAGE)
    if not _is_loopback(host):
        if not allow_remote:
            raise UserError(f"--http {host}: not a loopback address; serving the memory to the "
                            "network needs --allow-remote and --token-file", code=USAGE)
        if token_file is None:
            raise UserError(f"--http {host} with --allow-remote: a --token-file is required "
                            "(anyone who can reach the port could read and erase the memory)",
                            code=USAGE)
    return host, int(port)


def _check_port(host: str, port: int) -> None:
    """Bind the address once before the server starts: uvicorn reports a port it cannot bind
    (taken by another server, say) with its own log line and exit code 3."""
    import socket

    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port,
                                                          type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
            s.bind(addr)
    except OSError as exc:  # gaierror included
        raise UserError(f"--http {host}:{port}: cannot listen there: "
                        f"{exc.strerror or exc}", code=IOERR,
                        hint="another process may hold the port (another synapse mcp?): stop "
                             "it or pick another port") from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def _token(path: Path) -> str:
    try:
        text = path.read_text("utf-8").strip()
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise UserError(f"--token-file {path}: no such file", code=NOINPUT) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--token-file {path}: cannot read it ({exc})", code=USAGE) from None
    if len(text) < 16 or any(c.isspace() for c in text):
        raise UserError(f"--token-file {path}: the token must be one word of at least 16 "
                        "characters", code=USAGE, hint="python3 -c 'import secrets; "
                                                       "print(secrets.token_urlsafe(32))' > FILE")
    if mode & (stat.S_IRWXG | stat.S_IRWXO) and os.name == "posix":
        output.warn(f"synapse mcp: {path} can be read by other users (chmod 600 it)")
    return text
