"""`synapse mcp` as an agent meets it: a real server subprocess driven by the MCP SDK's own
client, over stdio and over streamable HTTP on 127.0.0.1 (real MiniLM, real llama.cpp)."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

SYNAPSE = str(Path(sys.executable).with_name("synapse"))

FACTS = [
    {"text": "Ana moved from Lisbon to Porto in March.", "speaker": "user",
     "timestamp": "2026-03-02T10:00:00Z", "tags": ["user:ana"]},
    {"text": "I drink green tea every morning, never coffee.", "speaker": "user",
     "timestamp": "2026-03-03T08:00:00Z"},
    {"text": "The Atlas design review is on October 8 at 2pm.", "speaker": "Priya",
     "timestamp": "2026-09-20T09:00:00Z", "tags": ["project:atlas"]},
]


def env_for(store: Path) -> dict:
    return dict(os.environ, SYNAPSE_HOME=str(store), HF_HUB_OFFLINE="1")


def stdio(store: Path, *args: str) -> Client:
    return Client(StdioServerParameters(command=SYNAPSE, args=["mcp", *args],
                                        env=env_for(store)), read_timeout_seconds=300)


def data(result) -> dict | list:
    """A successful tool result's JSON."""
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def error(result) -> str:
    assert result.is_error
    return result.content[0].text


def run(coro_fn):
    return anyio.run(coro_fn)


async def beside_consolidate(client, call, delay: float = 0.5):
    """consolidate on `client` and, `delay` s after it starts (the writer lock taken), `call()`:
    (consolidate's JSON, the call's JSON, when each ended: {"consolidate", "other"})."""
    ends, got = {}, []

    async def other():
        await anyio.sleep(delay)
        got.append(data(await call()))
        ends["other"] = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(other)
        done = data(await client.call_tool("consolidate", {"max_seconds": 600}))
        ends["consolidate"] = time.monotonic()
    return done, got[0], ends


def test_tools_listed_with_schemas_and_descriptions(tmp_path):
    async def go():
        async with stdio(tmp_path / "s") as c:
            return (await c.list_tools()).tools
    tools = {t.name: t for t in run(go)}
    assert set(tools) == {"remember", "recall", "forget", "restore", "pin", "unpin",
                          "memory_status", "find_nodes", "open_node", "consolidate"}
    for t in tools.values():
        assert len(t.description) > 60, t.name  # written for a model to read
        assert t.input_schema["type"] == "object"
    assert tools["recall"].input_schema["required"] == ["query"]
    assert "text" in json.dumps(tools["remember"].input_schema)
    assert tools["memory_status"].annotations.read_only_hint is True
    assert tools["forget"].annotations.destructive_hint is True


def test_remember_recall_reject_and_bad_arguments(tmp_path):
    async def go():
        async with stdio(tmp_path / "s") as c:
            empty = data(await c.call_tool("recall", {"query": "Where does Ana live?"}))
            stored = data(await c.call_tool("remember", {"memories": FACTS}))
            again = data(await c.call_tool("remember", {"memories": FACTS[:1]}))
            hit = data(await c.call_tool("recall", {"query": "Which city did Ana move to?",
                                                    "k": 3}))
            tagged = data(await c.call_tool("recall", {"query": "design review",
                                                       "tags": ["user:ana"], "k": 5}))
            never = data(await c.call_tool("recall", {"query": "What is Priya's blood type?"}))
            bad = [await c.call_tool("recall", {"query": "tea", "k": 0}),
                   await c.call_tool("recall", {"query": "   "}),
                   await c.call_tool("recall", {"query": "tea", "since": "last tuesday"}),
                   await c.call_tool("remember", {"memories": [{"text": ""}]}),
                   await c.call_tool("remember", {"memories": [{"txt": "typo"}]}),
                   await c.call_tool("open_node", {"id": 1}),
                   await c.call_tool("pin", {"ids": [99999]})]
            alive = data(await c.call_tool("memory_status", {}))
            return empty, stored, again, hit, tagged, never, bad, alive
    empty, stored, again, hit, tagged, never, bad, alive = run(go)
    assert empty["rejected"] is True and empty["results"] == []
    assert stored["counts"] == {"stored": 3, "duplicate": 0, "gated": 0}
    assert [r["status"] for r in stored["results"]] == ["stored"] * 3
    assert again["counts"]["duplicate"] == 1
    assert hit["rejected"] is False and "Porto" in hit["results"][0]["text"]
    assert {"query", "rejected", "confidence", "results"} <= set(hit)
    assert all("user:ana" in json.dumps(r) or r["id"] == stored["results"][0]["id"]
               for r in tagged["results"])  # the filter holds: only Ana's memory
    assert all(r["id"] == stored["results"][0]["id"] for r in tagged["results"])
    assert never["rejected"] is True and never["results"] == []
    messages = [error(b) for b in bad]
    assert "k: 0: expected 1 to 1000" in messages[0]
    assert "empty query" in messages[1]
    assert "since" in messages[2]
    assert "`text` is empty" in messages[3]
    assert "unknown field" in messages[4] or "text" in messages[4]
    assert "not a semantic node" in messages[5]
    assert "no record with this id" in messages[6]
    assert not any("Traceback" in m for m in messages)
    assert alive["records"]["by_type"]["episodic"] == 3  # the server lived through them all


def test_forget_dry_run_trash_restore_purge(tmp_path):
    async def go():
        async with stdio(tmp_path / "s") as c:
            ids = [r["id"] for r in data(await c.call_tool("remember",
                                                          {"memories": FACTS}))["results"]]
            q = {"query": "What does the user drink in the morning?", "k": 3}
            before = data(await c.call_tool("recall", q))
            dry = data(await c.call_tool("forget", {"query": "green tea", "dry_run": True}))
            after_dry = data(await c.call_tool("recall", q))
            gone = data(await c.call_tool("forget", {"ids": [ids[1]]}))
            after = data(await c.call_tool("recall", q))
            back = data(await c.call_tool("restore", {"ids": [ids[1]]}))
            restored = data(await c.call_tool("recall", q))
            pinned = data(await c.call_tool("pin", {"ids": [ids[1]]}))
            protected = data(await c.call_tool("forget", {"ids": [ids[1]]}))
            data(await c.call_tool("unpin", {"ids": [ids[1]]}))
            purged = data(await c.call_tool("forget", {"ids": [ids[1]], "purge": True}))
            neither = await c.call_tool("forget", {})
            return ids, before, dry, after_dry, gone, after, back, restored, pinned, \
                protected, purged, neither
    ids, before, dry, after_dry, gone, after, back, restored, pinned, protected, purged, \
        neither = run(go)
    tea = ids[1]
    assert before["results"][0]["id"] == tea
    assert tea in dry["selected"] and any("tea" in m["text"] for m in dry["query_matches"])
    assert after_dry["results"][0]["id"] == tea  # a dry run changed nothing
    assert gone["trashed"] == [tea]
    assert tea not in [r["id"] for r in after["results"]]
    assert back["restored"] == [tea]
    assert restored["results"][0]["id"] == tea
    assert pinned["results"] == [{"id": tea, "pinned": True, "resolved": True, "in_trash": False,
                       "dormant": False}]
    assert protected["trashed"] == [] and protected["protected"]["pinned"] == [tea]
    assert purged["trashed"] == [tea] and purged["purged"] is True
    assert "give `ids` or `query`" in error(neither)
    assert b"green tea" not in b"".join(p.read_bytes() for p in (tmp_path / "s").rglob("*")
                                        if p.is_file())


def test_sees_a_cli_ingest_from_another_process(tmp_path):
    store = tmp_path / "s"

    async def go():
        async with stdio(store) as c:
            data(await c.call_tool("remember", {"memories": FACTS[:1]}))
            first = data(await c.call_tool("recall", {"query": "Where is the Atlas review?"}))
            subprocess.run([SYNAPSE, "ingest", "-"], input=json.dumps(FACTS[2]).encode(),
                           env=env_for(store), check=True, capture_output=True)
            second = data(await c.call_tool("recall", {"query": "When is the Atlas design "
                                                                "review?", "k": 3}))
            return first, second
    first, second = run(go)
    assert not any("Atlas" in r["text"] for r in first["results"])
    assert "Atlas" in second["results"][0]["text"]


def test_browse_the_graph_after_consolidate(tmp_path):
    store = tmp_path / "s"
    subprocess.run([SYNAPSE, "ingest", str(Path(__file__).parents[1] / "fixtures" /
                                           "demo.ndjson")], env=env_for(store), check=True,
                   capture_output=True)

    async def go():
        async with stdio(store) as c:
            done = data(await c.call_tool("consolidate", {"max_seconds": 600}))
            found = data(await c.call_tool("find_nodes", {"name": "caroline"}))["nodes"]
            node = data(await c.call_tool("open_node", {"id": found[0]["id"]}))
            status = await c.read_resource("synapse://status")
            record = await c.read_resource(f"synapse://record/{found[0]['id']}")
            bad = [error(await c.call_tool("find_nodes", {"limit": n})) for n in (0, 201)]
            return done, found, node, status, record, bad
    done, found, node, status, record, bad = run(go)
    # a limit out of range is an error, as recall's k, not quietly 1 or 200
    assert all("limit" in e and "expected 1 to 200" in e for e in bad), bad
    assert done["windows"] >= 1 and done["left_windows"] == 0
    assert found[0]["name"] == "Caroline" and found[0]["type"]
    assert node["episodes"] and all("text" in e for e in node["episodes"])
    assert any("Caroline" in e["text"] or e["speaker"] == "Caroline" for e in node["episodes"])
    assert json.loads(status.contents[0].text)["records"]["by_type"]["semantic"] >= 1
    assert json.loads(record.contents[0].text)["payload"]["name"] == "Caroline"


# --- HTTP ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    def __init__(self, store: Path, *extra: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen([SYNAPSE, "mcp", "--http", f"127.0.0.1:{self.port}", *extra],
                                     env=env_for(store), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.proc.stderr.read().decode()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("synapse mcp --http did not start listening")

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err.decode()


def test_http_consolidate_while_another_client_recalls_then_sigterm(tmp_path):
    store = tmp_path / "s"
    subprocess.run([SYNAPSE, "ingest", str(Path(__file__).parents[1] / "fixtures" /
                                           "demo.ndjson")], env=env_for(store), check=True,
                   capture_output=True)
    server = HttpServer(store)

    async def go():
        async with Client(server.url) as a, Client(server.url) as b:
            data(await b.call_tool("recall", {"query": "hiking"}))  # models loaded
            return await beside_consolidate(a, lambda: b.call_tool(
                "recall", {"query": "Where did Caroline go hiking?", "k": 3}))
    try:
        done, recalled, ends = run(go)
    finally:
        code, err = server.stop()
    assert done["windows"] >= 1
    assert "Dolomites" in recalled["results"][0]["text"]
    # the recall was answered while consolidate held the writer lock, not after it
    assert ends["other"] < ends["consolidate"]
    assert code == 0, err
    assert "Traceback" not in err
    verify = subprocess.run([SYNAPSE, "inspect", "verify", "--json"], env=env_for(store),
                            capture_output=True)
    assert verify.returncode == 0 and json.loads(verify.stdout)["ok"] is True


def test_http_bearer_token(tmp_path):
    token = "t0ken-" + "x" * 30
    (tmp_path / "token").write_text(token + "\n")
    (tmp_path / "token").chmod(0o600)
    server = HttpServer(tmp_path / "s", "--token-file", str(tmp_path / "token"))
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def go():
        async with httpx2.AsyncClient() as h:
            bare = await h.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            wrong = await h.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                 headers={"Authorization": "Bearer nope"})
            token_as_scheme = await h.post(server.url, json={"jsonrpc": "2.0", "id": 1,
                                                             "method": "ping"},
                                           headers={"Authorization": token})
        counts = []
        for scheme in ("Bearer", "bearer"):  # the scheme is case-insensitive (RFC 7235)
            http = create_mcp_http_client(headers={"Authorization": f"{scheme} {token}"})
            async with Client(streamable_http_client(server.url, http_client=http)) as c:
                counts.append(len((await c.list_tools()).tools))
        return bare.status_code, wrong.status_code, token_as_scheme.status_code, counts
    try:
        bare, wrong, token_as_scheme, n_tools = run(go)
    finally:
        server.stop()
    assert (bare, wrong, token_as_scheme) == (401, 401, 401)
    assert n_tools == [10, 10]


@pytest.mark.parametrize("args, message", [
    (["--http", "0.0.0.0:8765"], "not a loopback address"),
    (["--http", "192.168.1.5:8765", "--allow-remote"], "--token-file is required"),
    (["--http", "localhost"], "expected HOST:PORT"),
    (["--token-file", "t"], "applies to --http only"),
])
def test_refused_binds(tmp_path, args, message):
    got = subprocess.run([SYNAPSE, "mcp", *args], env=env_for(tmp_path / "s"),
                         capture_output=True, timeout=60)
    assert got.returncode == 2
    assert message in got.stderr.decode() and "Traceback" not in got.stderr.decode()


def test_stdio_sigterm_leaves_a_verified_store(tmp_path):
    """SIGTERM while the server is idle between calls: it exits 0 and the store verifies."""
    store = tmp_path / "s"
    proc = subprocess.Popen([SYNAPSE, "mcp"], env=env_for(store), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "0"}}},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "remember", "arguments": {"memories": FACTS}}}]
    for line in lines:
        proc.stdin.write(json.dumps(line).encode() + b"\n")
    proc.stdin.flush()
    answers = []
    reader = threading.Thread(target=lambda: answers.extend(
        json.loads(proc.stdout.readline()) for _ in range(2)))
    reader.start()
    reader.join(timeout=180)
    assert len(answers) == 2 and not answers[1]["result"].get("isError"), (answers, proc.stderr.read1().decode())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    verify = subprocess.run([SYNAPSE, "inspect", "verify", "--json"], env=env_for(store),
                            capture_output=True)
    assert json.loads(verify.stdout)["ok"] is True
    assert json.loads(subprocess.run([SYNAPSE, "inspect", "--json"], env=env_for(store),
                                     capture_output=True).stdout)["records"]["total"] == 3


def test_remember_takes_the_whole_input_schema_and_refuses_unknown_fields(tmp_path):
    store = tmp_path / "s"

    async def go():
        async with stdio(store) as c:
            ok = data(await c.call_tool("remember", {"memories": [
                {"text": "renew the passport before June", "resolved": False, "valence": -0.5,
                 "source": "todo.md", "dia_id": "t1", "arousal": 0.7}]}))
            bad = [await c.call_tool("remember", {"memories": [{"text": "a", "colour": "red"}]}),
                   await c.call_tool("remember", {"memories": [{"text": "a",
                                                               "importance": True}]}),
                   await c.call_tool("consolidate", {"max_seconds": "inf"}),
                   # tool arguments are strict: nothing is coerced into an id or a flag
                   await c.call_tool("forget", {"ids": [True]}),
                   await c.call_tool("forget", {"ids": ["1"]}),
                   await c.call_tool("pin", {"ids": [1.0]}),
                   await c.call_tool("recall", {"query": "passport", "explain": "yes"}),
                   # an unknown argument is an error: "tag" for "tags" recalled unfiltered
                   await c.call_tool("recall", {"query": "passport", "tag": ["user:x"]})]
            # a session number and a float timestamp are read as the ingest schema reads them
            num = data(await c.call_tool("remember", {"memories": [
                {"text": "passport photos taken", "session": 3, "timestamp": 1.7e12}]}))
            left = data(await c.call_tool("recall", {"query": "passport", "k": 5}))
            return ok, bad, num, left
    ok, bad, num, left = run(go)
    assert num["counts"]["stored"] == 1
    assert {r["id"] for r in left["results"]} == {ok["results"][0]["id"],
                                                  num["results"][0]["id"]}  # nothing forgotten
    rid = ok["results"][0]["id"]
    rec = json.loads(subprocess.run([SYNAPSE, "inspect", "record", str(rid)], env=env_for(store),
                                    capture_output=True, text=True, check=True).stdout)
    assert rec["header"]["flags_decoded"]["resolved"] is False  # an open task stays open
    assert rec["header"]["valence"] < 0 and rec["payload"]["source"] == "todo.md"
    messages = [error(b) for b in bad]
    assert "colour" in messages[0] and "importance" in messages[1]
    assert all(m.count("\n") == 0 and "pydantic" not in m for m in messages), messages
    assert "max_seconds: input should be" in messages[2] and "got 'inf'" in messages[2]
    assert "ids.0: input should be a valid integer, got True" in messages[3], messages[3]
    assert messages[7] == "recall: tag: unknown argument", messages[7]
    assert not any("Traceback" in m for m in messages)


def _rpc(proc, msg: dict) -> None:
    proc.stdin.write((json.dumps(msg) + "\n").encode())
    proc.stdin.flush()


def _initialize(proc) -> None:
    _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}})
    _reply(proc, 1)
    _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})


def _reply(proc, rid: int, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        assert line, proc.stderr.read().decode()[-2000:]
        msg = json.loads(line)
        if msg.get("id") == rid:
            return msg
    raise AssertionError(f"no reply to request {rid}")


def test_stdio_answers_a_line_it_cannot_read_with_an_error_for_its_id(tmp_path):
    """A lone surrogate or a cut-off line is no JSON-RPC message: the server answers it with a
    JSON-RPC error (its id when the line has one) and a warning on stderr, and goes on; the
    SDK alone dropped it without a word, and the client waited for that id for ever."""
    store = tmp_path / "s"
    proc = subprocess.Popen([SYNAPSE, "mcp"], env=env_for(store), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _initialize(proc)
        remember = '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"remember",' \
                   '"arguments":{"memories":[{"text":"%s'
        for line in (remember % (2, "bad \\ud800 end") + '"}]}}}', remember % (4, "cut off"),
                     '{"jsonrpc":"2.0","id":"x5"}',
                     '   ', '{"jsonrpc":"2.0","id":0,"result":null}',  # never answered
                     '{"jsonrpc":"2.0","id":"a\\x","method":"ping"}',  # an id no JSON reads
                     '{"jsonrpc":"2.0","id":6,"method":"ping"'):
            proc.stdin.write(line.encode() + b"\n")
        proc.stdin.flush()
        got = []  # every reply, in order, up to the last line's
        while not got or got[-1].get("id") != 6:
            got.append(json.loads(proc.stdout.readline()))
        assert [m["id"] for m in got] == [2, 4, "x5", None, 6], got  # blank, response: none
        assert [m["error"]["code"] for m in got] == [-32700, -32700, -32600, -32700, -32700]
        assert "method" in got[2]["error"]["message"]  # JSON, but no method
        _rpc(proc, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "remember", "arguments": {"memories": [{"text": "still serving"}]}}})
        assert not _reply(proc, 3)["result"].get("isError")
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
        err = proc.stderr.read().decode()
        assert "request 2: not JSON" in err and "request 4: not JSON" in err, err
        assert "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_cancelled_consolidate_frees_the_store_and_stdin_eof_ends_the_server(tmp_path):
    """The model runs in a worker thread: a cancelled call (or a client gone) stops it after
    the window being extracted, so the next write does not find the server's own lock."""
    store = tmp_path / "s"
    data_dir = Path(__file__).parents[1] / "bench" / "quality" / "agent_use"
    for name in ("caregiving", "dev_assistant"):
        subprocess.run([SYNAPSE, "ingest", str(data_dir / f"{name}.ndjson")], env=env_for(store),
                       check=True, capture_output=True)
    proc = subprocess.Popen([SYNAPSE, "mcp"], env=env_for(store), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _initialize(proc)
        _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "consolidate", "arguments": {"max_seconds": 3600}}})
        time.sleep(8)  # the model loaded, windows being extracted
        _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": 2}})
        _rpc(proc, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "remember", "arguments": {"memories": [{"text": "after the cancel"}]}}})
        result = _reply(proc, 3)["result"]
        assert not result.get("isError"), result
        _rpc(proc, {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "consolidate", "arguments": {"max_seconds": 3600}}})
        time.sleep(3)
        t0 = time.monotonic()
        proc.stdin.close()
        proc.wait(timeout=60)
        assert time.monotonic() - t0 < 30  # not the rest of the 1000-turn consolidation
    finally:
        if proc.poll() is None:
            proc.kill()
    left = json.loads(subprocess.run([SYNAPSE, "inspect", "--json"], env=env_for(store),
                                     capture_output=True, text=True, check=True).stdout)
    assert left["records"]["by_flag"]["consolidated"] < left["records"]["by_type"]["episodic"]
    assert subprocess.run([SYNAPSE, "inspect", "verify"], env=env_for(store),
                          capture_output=True).returncode == 0


def test_forget_with_tags_touches_only_that_users_memories(tmp_path):
    """One store, a tag per user: `forget` scoped by `tags` neither forgets nor shows another
    user's memories, and the same sentence from two users is two memories."""
    store = tmp_path / "s"

    async def go():
        async with stdio(store) as c:
            for user in ("ana", "bob"):
                await c.call_tool("remember", {"memories": [
                    {"text": "My password hint is the name of my first cat.",
                     "tags": [f"user:{user}"]}]})
            dry = data(await c.call_tool("forget", {"query": "password hint",
                                                    "tags": ["user:bob"], "dry_run": True}))
            done = data(await c.call_tool("forget", {"query": "password hint",
                                                     "tags": ["user:bob"]}))
            ana = data(await c.call_tool("recall", {"query": "What is my password hint?",
                                                    "tags": ["user:ana"]}))
            return dry, done, ana
    dry, done, ana = run(go)
    assert dry["selected"] == [2] and [m["id"] for m in dry["query_matches"]] == [2]
    assert done["trashed"] == [2]
    assert [r["id"] for r in ana["results"]] == [1]


def test_pin_unpin_restore_with_tags_leave_another_users_memories_alone(tmp_path):
    """Without a scope Ana's agent could pin Bob's memory (his forget then kept it), unpin it
    and restore what he forgot (found by a helper)."""
    store = tmp_path / "s"

    async def go():
        async with stdio(store) as c:
            for user in ("ana", "bob"):
                await c.call_tool("remember", {"memories": [
                    {"text": f"{user} owes money", "tags": [f"user:{user}"]}]})
            await c.call_tool("forget", {"ids": [2], "tags": ["user:bob"]})
            return [data(await c.call_tool(name, {"ids": [1, 2], "tags": ["user:ana"]}))
                    for name in ("pin", "restore", "unpin")]
    pin, restore, unpin = run(go)
    assert [r["id"] for r in pin["results"]] == [1] and pin["out_of_scope"] == [2]
    assert restore["restored"] == [] and restore["out_of_scope"] == [2]
    assert [r["id"] for r in unpin["results"]] == [1] and unpin["out_of_scope"] == [2]
    from synapse_cli import api

    assert [m["id"] for m in api.list_memories(store, trashed=True)["memories"]] == [2]


def test_parallel_writes_of_one_server_queue_and_sigterm_ends_it_with_stdin_open(tmp_path):
    """The SDK runs calls in parallel threads: three remembers at once each opened a writer, and
    one failed on the server's own lock after `mcp.write_wait`; they now queue. SIGTERM said
    "stopped" but the process waited for its stdin reader until the client closed stdin."""
    store = tmp_path / "s"
    proc = subprocess.Popen([SYNAPSE, "mcp"], env=dict(env_for(store), SYNAPSE_WRITE_WAIT="0.5"),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        _initialize(proc)
        for n in range(3):  # sent together; each takes longer than write_wait
            _rpc(proc, {"jsonrpc": "2.0", "id": 10 + n, "method": "tools/call", "params": {
                "name": "remember", "arguments": {"memories": [
                    {"text": f"note {n}-{k}: " + "the quarterly numbers look fine " * 12}
                    for k in range(150)]}}})
        replies = {}
        while len(replies) < 3:  # in the order they finish
            msg = json.loads(proc.stdout.readline())
            replies[msg["id"]] = msg["result"]
        results = [replies[10 + n] for n in range(3)]
        assert not any(r.get("isError") for r in results), results
        assert all(json.loads(r["content"][0]["text"])["counts"]["stored"] == 150
                   for r in results)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)  # stdin still open
        assert b"stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert subprocess.run([SYNAPSE, "inspect", "verify"], env=env_for(store),
                          capture_output=True).returncode == 0


# --- a server scoped to one user: `synapse mcp --scope TAG` ----------------------------------

LOCKERS = [{"text": f"My gym locker code is {code}.", "speaker": "user",
            "timestamp": f"2026-05-0{n}T08:00:00Z", "tags": [f"user:{user}"]}
           for n, (user, code) in enumerate([("ana", 4512), ("bob", 9981), ("ana", 7730)], 1)]


def two_users(store: Path) -> None:
    """Ana's memories are ids 1 and 3, Bob's id 2 (stored by a server without a scope)."""
    async def go():
        async with stdio(store) as c:
            ids = [r["id"] for r in data(await c.call_tool("remember",
                                                          {"memories": LOCKERS}))["results"]]
            assert ids == [1, 2, 3]
    run(go)


def as_ana(store: Path, calls):
    """Run `calls(client)` on a server started with --scope user:ana."""
    async def go():
        async with stdio(store, "--scope", "user:ana") as c:
            return await calls(c)
    return run(go)


def test_scope_remember_adds_the_tag(tmp_path):
    store = tmp_path / "s"

    async def calls(c):
        full = error(await c.call_tool("remember", {"memories": [
            {"text": "many tags", "tags": [f"t{i}" for i in range(64)]}]}))
        return full, data(await c.call_tool("remember", {"memories": [
            {"text": "Ana's sister lives in Braga.", "tags": ["family"]},
            {"text": "Ana prefers window seats.", "tags": ["USER:Ana"]}]}))
    full, out = as_ana(store, calls)
    from synapse_cli import api

    tags = [api.inspect_record(r["id"], store)["payload"]["tags"] for r in out["results"]]
    assert tags == [["family", "user:ana"], ["USER:Ana"]]  # one spelling per tag, as in ingest
    # 64 tags of the caller's own: the scope's tag would be the 65th (the error said "at most
    # 64" of a list of 64)
    assert "item 1" in full and "at most 63 besides this server's scope tag user:ana" in full


def test_scope_recall_returns_only_the_scopes_memories(tmp_path):
    store = tmp_path / "s"
    two_users(store)

    async def calls(c):
        q = {"query": "What is my gym locker code?", "k": 10}
        return (data(await c.call_tool("recall", q)),
                data(await c.call_tool("recall", {**q, "tags": ["user:bob"]})),
                data(await c.call_tool("recall", {**q, "explain": True})))
    mine, bobs, explained = as_ana(store, calls)
    assert sorted(r["id"] for r in mine["results"]) == [1, 3]
    assert bobs["results"] == []  # the caller's tags narrow the scope, never widen it
    assert "9981" not in json.dumps([mine, bobs, explained])


def test_scope_forget_never_selects_nor_shows_another_users_memory(tmp_path):
    store = tmp_path / "s"
    two_users(store)

    async def calls(c):
        return (data(await c.call_tool("forget", {"query": "gym locker code",
                                                  "dry_run": True})),
                data(await c.call_tool("forget", {"ids": [2]})),
                data(await c.call_tool("forget", {"ids": [2], "tags": ["user:bob"]})),
                data(await c.call_tool("forget", {"query": "gym locker code"})))
    dry, by_id, widened, by_query = as_ana(store, calls)
    assert dry["selected"] == [1, 3] and {m["id"] for m in dry["query_matches"]} == {1, 3}
    assert "9981" not in json.dumps(dry)
    assert by_id["trashed"] == [] and by_id["out_of_scope"] == [2]
    assert widened["trashed"] == [] and widened["out_of_scope"] == [2]
    assert sorted(by_query["trashed"]) == [1, 3]
    from synapse_cli import api

    assert [m["id"] for m in api.list_memories(store, trashed=True)["memories"]] == [3, 1]


def test_scope_answers_an_unknown_id_as_another_users(tmp_path):
    # a scoped agent cannot probe which ids exist: id 99 (never stored) and id 2 (Bob's) get
    # the same answer from every tool that takes ids
    store = tmp_path / "s"
    two_users(store)

    async def calls(c):
        return [data(await c.call_tool(name, {"ids": [2, 99]}))
                for name in ("forget", "restore", "pin", "unpin")]
    for out in as_ana(store, calls):
        assert out["out_of_scope"] == [2, 99], out
    from synapse_cli import api

    scoped = api.prune(store, ids=[99], within=["user:ana"], dry_run=True)
    assert scoped["out_of_scope"] == [99] and scoped["not_found"] == []
    with pytest.raises(api.InputError, match="no record"):  # unscoped: the admin is told
        api.prune(store, ids=[99], dry_run=True)


def test_scope_pin_unpin_restore_leave_another_users_memory_alone(tmp_path):
    store = tmp_path / "s"
    two_users(store)

    async def bob_forgets_and_pins():
        async with stdio(store) as c:
            data(await c.call_tool("forget", {"ids": [2]}))
    run(bob_forgets_and_pins)

    async def calls(c):
        out = [data(await c.call_tool(name, {"ids": [1, 2]}))
               for name in ("restore", "pin", "unpin", "pin")]
        out.append(data(await c.call_tool("restore", {"ids": [2], "tags": ["user:bob"]})))
        return out
    restore, pin, unpin, pin_again, restore_widened = as_ana(store, calls)
    assert restore["restored"] == [] and restore["out_of_scope"] == [2]
    assert restore_widened["restored"] == [] and restore_widened["out_of_scope"] == [2]
    for out in (pin, unpin, pin_again):
        assert [r["id"] for r in out["results"]] == [1] and out["out_of_scope"] == [2]
    from synapse_cli import api

    assert [m["id"] for m in api.list_memories(store, trashed=True)["memories"]] == [2]
    bob = api.inspect_record(2, store)["header"]["flags_decoded"]
    assert bob["pinned"] is False and bob["tombstone"] is True


def test_scope_restore_of_a_memory_remembered_again_names_only_the_scopes_copy(tmp_path):
    # a memory forgotten, remembered again, then restored: two live copies of one memory
    store = tmp_path / "s"
    two_users(store)

    async def bob_again():  # Bob's memory too is in the trash with a live copy (id 4)
        async with stdio(store) as c:
            data(await c.call_tool("forget", {"ids": [2]}))
            assert data(await c.call_tool("remember", {"memories": LOCKERS[1:2]}))[
                "results"][0]["id"] == 4
    run(bob_again)

    async def calls(c):
        data(await c.call_tool("forget", {"ids": [1]}))
        again = data(await c.call_tool("remember", {"memories": [LOCKERS[0]]}))
        return again, data(await c.call_tool("restore", {"ids": [1, 2]}))
    again, restore = as_ana(store, calls)
    assert again["results"][0]["id"] == 5
    assert restore["restored"] == [] and restore["already_live"] == [{"id": 1, "live_id": 5}]
    assert restore["out_of_scope"] == [2] and "4" not in json.dumps(restore)


def test_scope_memory_status_and_status_resource_count_the_scope(tmp_path):
    store = tmp_path / "s"
    two_users(store)

    async def calls(c):
        return (data(await c.call_tool("memory_status", {})),
                json.loads((await c.read_resource("synapse://status")).contents[0].text))
    status, resource = as_ana(store, calls)
    for s in (status, resource):
        assert s["records"]["total"] == 2 and s["records"]["by_type"]["episodic"] == 2
        assert s["scope"] == ["user:ana"] and "bytes" not in s and "edges" not in s


def test_scope_record_resource_hides_another_users_record(tmp_path):
    store = tmp_path / "s"
    two_users(store)

    async def read(c, rid):
        try:
            return json.loads((await c.read_resource(f"synapse://record/{rid}")).contents[0].text)
        except Exception as exc:  # the SDK raises the server's ResourceError
            return str(exc)

    async def calls(c):
        return await read(c, 1), await read(c, 2), await read(c, 99)
    mine, bobs, missing = as_ana(store, calls)
    assert mine["payload"]["text"] == "My gym locker code is 4512."
    # its place in a segment would count the records of every user before it
    assert "segment" not in mine and "index" not in mine
    assert all(e.get("to", e.get("from")) in (1, 3)
               for e in mine["edges"]["out"] + mine["edges"]["in"])
    assert isinstance(bobs, str) and "9981" not in bobs
    assert bobs.replace("id 2", "id N") == missing.replace("id 99", "id N")
    assert "no record with this id" in bobs


def test_scope_graph_tools_show_the_scopes_nodes_and_consolidate_its_count(tmp_path):
    store = tmp_path / "s"
    two_users(store)
    from synapse_cli import api

    async def consolidate(c):
        return data(await c.call_tool("consolidate", {"max_seconds": 120}))
    consolidated = as_ana(store, consolidate)
    # it consolidated Bob's memory too, but says only what is Ana's: the store-wide counts
    # (episodes 3, windows, nodes, edges) told her agent about other users' activity
    assert consolidated == {"scope": ["user:ana"], "finished": True, "episodes": 2}
    # consolidation keeps each user's nodes apart (FORMAT.md 13.3): a node carries the tags of
    # the memories it was built from
    bobs = [n["id"] for n in api.nodes("", store, limit=200, within=["user:bob"])]
    everyone = {n["id"] for n in api.nodes("", store, limit=200)}
    assert bobs and set(bobs) < everyone

    async def calls(c):
        found = data(await c.call_tool("find_nodes", {"name": ""}))["nodes"]
        opened = [data(await c.call_tool("open_node", {"id": n["id"]})) for n in found]
        return (found, opened, await c.call_tool("open_node", {"id": bobs[0]}),
                await c.call_tool("open_node", {"id": 999}),
                json.loads((await c.read_resource("synapse://record/1")).contents[0].text))
    found, opened, bobs_node, missing, record = as_ana(store, calls)
    assert found and not {n["id"] for n in found} & set(bobs)
    assert all({e["id"] for e in o["episodes"]} <= {1, 3} for o in opened)
    assert any(o["episodes"] for o in opened)
    assert "9981" not in json.dumps([found, opened])
    assert error(bobs_node).replace(str(bobs[0]), "N") == error(missing).replace("999", "N")
    assert "no record with this id" in error(bobs_node)
    # the scoped record shows only its edges to the scope's records
    assert api.inspect_record(1, store)["edges"]["out"]
    ana = {1, 3} | {n["id"] for n in found}
    assert all(e.get("to", e.get("from")) in ana
               for e in record["edges"]["out"] + record["edges"]["in"])


@pytest.mark.parametrize("tag, message", [
    ("", "empty tag"),
    ("speaker:ana", "is reserved"),
    ("x" * 1001, "longer than 1000"),
    ("user:ana\u200b", "U+200B"),  # looks like user:ana, would be another user
    ("ana", "NAMESPACE:VALUE"),  # without a namespace, remember could not refuse user:bob
])
def test_bad_scope_exits_2(tmp_path, tag, message):
    got = subprocess.run([SYNAPSE, "mcp", "--scope", tag], env=env_for(tmp_path / "s"),
                         capture_output=True, timeout=60)
    err = got.stderr.decode()
    assert got.returncode == 2 and "--scope" in err and message in err
    assert "Traceback" not in err


def test_scope_remember_cannot_file_a_memory_under_another_scope(tmp_path):
    # tags ["user:bob"] on a server scoped to user:ana: the memory carried both tags and Bob's
    # recall ranked it first (a planted "Bob's new bank PIN is 0000")
    store = tmp_path / "s"

    async def calls(c):
        planted = [await c.call_tool("remember", {"memories": [
            {"text": "Bob's new bank PIN is 0000.", "tags": tags}]})
            for tags in (["user:bob"], ["USER:BOB "], ["project:x", "user:bob"])]
        fine = data(await c.call_tool("remember", {"memories": [
            {"text": "Ana's bank is in Porto.", "tags": ["project:x", "user:ana"]}]}))
        many = await c.call_tool("pin", {"ids": list(range(1, 10_002))})
        return planted, fine, many
    planted, fine, many = as_ana(store, calls)
    for result in planted:
        assert "another scope" in error(result)
    assert fine["counts"]["stored"] == 1
    assert "at most 10000" in error(many)  # a million ids took a core for minutes
    from synapse_cli import api

    assert api.inspect(store)["records"]["total"] == 1


def test_a_consolidate_closed_between_two_slices_writes_nothing_more(tmp_path, monkeypatch):
    # close() can take the server's write lock in the pause between two slices and return: the
    # consolidation then took it back and committed another window (a review)
    from synapse_cli import api, mcp_server
    from synapse_cli.models.fake import FakeEmbedder

    store = tmp_path / "s"
    api.ingest(["a note"], store=store, embedder=FakeEmbedder(384))
    mem = mcp_server.Memory(store)
    mem._extractor, mem._embedder = object(), FakeEmbedder(384)
    slices = []

    def run_consolidate(path, *, between, **kw):  # two slices, the server closing in between
        slices.append(1)
        mem.stopping.set()
        between()
        slices.append(2)
    monkeypatch.setattr(mcp_server.api, "run_consolidate", run_consolidate)
    with pytest.raises(mcp_server.Stopped, match="between two slices"):
        mem.consolidate(10.0, threading.Event())
    assert slices == [1]


def test_remember_goes_in_between_two_slices_of_a_long_consolidate(tmp_path, monkeypatch):
    # The nightly consolidate holds the writer lock a slice at a time: an agent's remember on
    # the same server is stored before the run ends, not after it (the real SDK client,
    # in-process; the model replaced by a slow extractor behind the same Protocol).
    from synapse_cli import api, mcp_server
    from synapse_cli.models.fake import FakeEmbedder

    class SlowExtractor:
        cache_id = "slow-test-extractor"

        def extract(self, texts):
            time.sleep(0.15)
            return {"entities": [], "relations": []}

    store, emb = tmp_path / "s", FakeEmbedder(384)
    api.ingest([{"text": f"note {i} on the garden", "session": "s"} for i in range(60)],
               store=store, embedder=emb)
    monkeypatch.setattr(api, "SLICE_SECONDS", 0.3)
    server = mcp_server.build(store)
    server.memory._extractor, server.memory._embedder = SlowExtractor(), emb

    async def go():
        async with Client(server) as c:
            return await beside_consolidate(c, lambda: c.call_tool(
                "remember", {"memories": [{"text": "water the roses"}]}))
    try:
        done, remembered, ends = run(go)
    finally:
        server.memory.close()
    assert remembered["results"][0]["status"] == "stored"
    assert ends["other"] < ends["consolidate"]
    # 60 notes in windows of 5, and the new memory too: each slice plans again
    assert done["windows"] == 13 and done["left_windows"] == 0


def test_an_interrupt_inside_the_sdk_s_task_group_is_a_quiet_stop():
    """SIGTERM landing inside anyio's cancel-scope code came out of serve() as an
    ExceptionGroup of a RuntimeError whose context is the KeyboardInterrupt (exit 70 with a
    traceback, seen once in test_stdio_sigterm_leaves_a_verified_store); it is a stop."""
    from synapse_cli.commands.mcp_cmd import _interrupted

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("Attempted to exit a cancel scope that isn't the current task's")
    except RuntimeError as exc:
        wrapped = exc
    group = BaseExceptionGroup("unhandled errors in a TaskGroup", [wrapped])
    assert _interrupted(group) and _interrupted(KeyboardInterrupt())
    assert not _interrupted(BaseExceptionGroup("x", [ValueError("a real bug")]))


def test_http_on_a_port_already_taken_is_a_clear_error(tmp_path):
    """A second server on a taken port ended with uvicorn's own log line and exit code 3, which
    the exit-code table does not have (hostile pass): exit 74, saying what and where."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        p = subprocess.run([SYNAPSE, "mcp", "--http", f"127.0.0.1:{port}"],
                           env=env_for(tmp_path / "st"), capture_output=True, text=True,
                           timeout=120)
    assert p.returncode == 74, p.stderr
    assert f"--http 127.0.0.1:{port}: cannot listen there" in p.stderr
    assert "Traceback" not in p.stderr and "ERROR:" not in p.stderr


def test_http_a_client_that_goes_away_mid_request_is_one_warning_not_a_traceback(tmp_path):
    """A client that sent half its body and closed left a ten-line ClientDisconnect traceback
    in the server's log (hostile pass); the server keeps serving either way."""
    srv = HttpServer(tmp_path / "st")
    try:
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % srv.port
                      + b"Content-Type: application/json\r\n"
                      b"Accept: application/json, text/event-stream\r\n"
                      b"Content-Length: 1000\r\n\r\n{\"jsonrpc\"")
            time.sleep(0.5)
        time.sleep(1.0)
        socket.create_connection(("127.0.0.1", srv.port), timeout=5).close()  # still serving
    finally:
        code, err = srv.stop()
    assert "Traceback" not in err and "ClientDisconnect" not in err, err
    assert "a client went away before its request was read" in err
