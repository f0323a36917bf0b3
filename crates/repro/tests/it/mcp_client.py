"""MCP client of crates/repro/tests/it/mcp.rs: the official Python SDK (`mcp` on PyPI) talking to `repro mcp`.

Usage: mcp_client.py SCENARIO SERVER WORKDIR [BOUND_FILE]
  SERVER is `stdio:REPRO_BINARY[,EXTRA_ARG...]` (the client starts `repro mcp` itself) or an http:// URL.
Each scenario asserts what it checks (a failed assert exits non-zero with the message) and prints one JSON
object of what it saw on stdout for the Rust side to check further.
"""

import json
import os
import sys
import uuid

import anyio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

CALL_TIMEOUT = 120


def fail(msg):
    raise AssertionError(msg)


def client_for(server, workdir):
    if server.startswith("stdio:"):
        words = server[len("stdio:"):].split(",")
        params = StdioServerParameters(
            command=words[0],
            args=["mcp", "--no-config", "--max-jobs", "2"] + words[1:],
            cwd=workdir,
            env={"REPRO_STATE_DIR": os.path.join(workdir, ".repro")},
        )
        return Client(params, read_timeout_seconds=CALL_TIMEOUT)
    return Client(server, read_timeout_seconds=CALL_TIMEOUT)


async def call(c, name, args, progress=None):
    return await c.call_tool(name, args, read_timeout_seconds=CALL_TIMEOUT, progress_callback=progress)


def structured(r, what):
    if r.is_error:
        fail(f"{what}: tool error: {r.content}")
    sc = r.structured_content
    if not isinstance(sc, dict):
        fail(f"{what}: no structured content: {r}")
    return sc


async def refused(c, name, args, needle):
    """The call must fail with a JSON-RPC error (or a tool error) whose message contains `needle`."""
    try:
        r = await call(c, name, args)
    except MCPError as e:
        msg = str(e)
        if needle not in msg:
            fail(f"{name} {args}: refused, but the message does not name {needle!r}: {msg}")
        return msg
    if not r.is_error:
        fail(f"{name} {args}: was not refused: {r.structured_content}")
    msg = json.dumps(r.structured_content) + " " + " ".join(getattr(b, "text", "") for b in r.content)
    if needle not in msg:
        fail(f"{name} {args}: tool error without {needle!r}: {msg}")
    return msg


async def read_text(c, uri):
    res = await c.read_resource(uri)
    if len(res.contents) != 1:
        fail(f"{uri}: expected one content, got {res.contents}")
    content = res.contents[0]
    text = getattr(content, "text", None)
    if text is None:
        fail(f"{uri}: not text: {content}")
    return text


async def scenario_tools(c, workdir, _bound):
    tools = (await c.list_tools()).tools
    names = sorted(t.name for t in tools)
    want = sorted(["run", "verify", "capture", "replay", "inspect", "hunt", "explain", "shrink", "diff_runs",
                   "env", "attest"])
    if names != want:
        fail(f"tools: {names}, expected {want}")
    forbidden = {"bind", "binds", "env", "network", "state_dir", "memory", "disk", "keep_changes", "output",
                 "config", "with", "key"}
    schemas = {}
    for t in tools:
        s = t.input_schema
        if s.get("type") != "object":
            fail(f"{t.name}: schema type {s.get('type')}")
        if s.get("additionalProperties") is not False:
            fail(f"{t.name}: schema allows additional properties: {s}")
        props = set(s.get("properties", {}))
        if props & forbidden:
            fail(f"{t.name}: schema has limit fields {props & forbidden}")
        if not t.description:
            fail(f"{t.name}: no description")
        schemas[t.name] = s
    run = schemas["run"]
    if "command" not in run.get("required", []):
        fail(f"run: command is not required: {run}")
    cmd = run["properties"]["command"]
    if cmd.get("type") != "array" or cmd.get("items", {}).get("type") != "string":
        fail(f"run: command is not an array of strings: {cmd}")
    if "pack" not in schemas["replay"].get("required", []):
        fail("replay: pack is not required")
    if schemas["replay"]["properties"]["runs"].get("type") not in ("integer", ["integer", "null"]):
        fail(f"replay: runs: {schemas['replay']['properties']['runs']}")
    templates = (await c.list_resource_templates()).resource_templates
    uris = sorted(t.uri_template for t in templates)
    want_t = sorted(f"repro://runs/{{id}}/{k}" for k in ("stdout", "stderr", "changes"))
    if uris != want_t:
        fail(f"resource templates: {uris}")
    return {"tools": names, "templates": uris}


async def scenario_runs(c, workdir, bound):
    out = {}
    # run: a tiny guest; its stdout comes back as a resource.
    r = structured(await call(c, "run", {"command": ["sh", "-c", "echo hi; date +%s"]}), "run")
    if r["exit_status"] != 0 or r["result"]["exit_status"] != 0:
        fail(f"run: exit status {r['exit_status']}: {r}")
    run_id = r["run_id"]
    if not run_id or r["runs"][0]["id"] != run_id:
        fail(f"run: no run id: {r}")
    if r["result"]["id"] != run_id:
        fail(f"run: run_id {run_id} is not the record's {r['result']['id']}")
    uri = r["runs"][0]["stdout"]
    if uri != f"repro://runs/{run_id}/stdout":
        fail(f"run: stdout resource {uri}")
    text = await read_text(c, uri)
    lines = text.splitlines()
    if len(lines) != 2 or lines[0] != "hi" or not lines[1].isdigit():
        fail(f"run: stdout resource {text!r}")
    on_disk = open(os.path.join(r["runs"][0]["dir"], "stdout")).read()
    if on_disk != text:
        fail(f"run: resource {text!r} is not the run's stdout file {on_disk!r}")
    changes = json.loads(await read_text(c, r["runs"][0]["changes"]))
    if "changes" not in changes and "added" not in json.dumps(changes):
        fail(f"run: changes resource {changes}")
    listed = [str(x.uri) for x in (await c.list_resources()).resources]
    if uri not in listed:
        fail(f"resources/list does not list {uri}: {listed[:6]}")
    out["run"] = {"id": run_id, "dir": r["runs"][0]["dir"], "stdout": text}

    # The server's --bind reaches the guest (the file is outside the working directory and /tmp is private).
    if bound:
        b = structured(await call(c, "run", {"command": ["cat", bound]}), "run cat bound")
        if b["result"]["exit_status"] != 0:
            fail(f"run: the server's --bind {bound} is not visible: {b}")
        out["bound_stdout"] = await read_text(c, b["runs"][0]["stdout"])

    # verify: deterministic, so the runs are identical...
    v = structured(await call(c, "verify", {"command": ["sh", "-c", "echo hi; date +%s"], "runs": 2}), "verify")
    if v["result"]["identical"] is not True or v["exit_status"] != 0:
        fail(f"verify: not identical: {v}")
    if len(v["runs"]) != 2:
        fail(f"verify: expected 2 run ids, got {v['runs']}")
    # ...and without the supervisor the nanoseconds differ (verify is not a constant).
    nv = structured(await call(c, "verify", {"command": ["sh", "-c", "date +%N"], "no_supervisor": True}),
                    "verify --no-supervisor")
    if nv["result"]["identical"] is not False or nv["exit_status"] != 122:
        fail(f"verify --no-supervisor date +%N: expected differences and exit 122: {nv}")
    out["verify"] = [x["id"] for x in v["runs"]]

    # capture: a failing command becomes a pack...
    cap = structured(await call(c, "capture", {"command": ["sh", "-c", "echo boom >&2; exit 3"]}), "capture")
    if cap["result"]["exit_status"] != 3 or cap["exit_status"] != 3:
        fail(f"capture: exit status: {cap}")
    pack = cap["result"]["pack"]
    if not pack or not os.path.isfile(pack):
        fail(f"capture: no pack file: {cap}")
    if not cap["run_id"]:
        fail(f"capture: no run id: {cap}")
    out["pack"] = pack

    # inspect it...
    ins = structured(await call(c, "inspect", {"pack": pack}), "inspect")["result"]
    if ins.get("argv") != ["sh", "-c", "echo boom >&2; exit 3"] or ins.get("signature", {}).get("exit_status") != 3:
        fail(f"inspect: not the captured command and signature: {ins}")

    # ...and replay it 3 times, with progress.
    seen = []

    async def progress(p, total, message):
        seen.append({"progress": p, "total": total, "message": message})

    rep = structured(await call(c, "replay", {"pack": pack, "runs": 3}, progress), "replay")
    if rep["result"]["reproduced"] != 3 or len(rep["result"]["runs"]) != 3:
        fail(f"replay: expected 3 reproduced runs: {rep['result']}")
    if len(rep["runs"]) != 3:
        fail(f"replay: expected 3 run ids: {rep['runs']}")
    if not seen:
        fail("replay runs=3: no progress notification")
    values = [s["progress"] for s in seen]
    if values != sorted(values) or any(s["total"] != 3 for s in seen) or values[-1] > 3:
        fail(f"replay: progress not increasing to at most 3: {seen}")
    err = await read_text(c, rep["runs"][0]["stderr"])
    if "boom" not in err:
        fail(f"replay: stderr resource of the replayed run: {err!r}")
    out["replay_progress"] = seen

    # env of a run recorded with its inputs, and diff_runs: the pack against itself is the same, a run of
    # another command is not.
    rec = structured(await call(c, "run", {"command": ["sh", "-c", "cat /etc/hostname"], "record_inputs": True}),
                     "run record_inputs")
    env = structured(await call(c, "env", {"target": rec["run_id"]}), "env")["result"]
    if not env.get("identity", "").startswith("blake3:") or not env.get("components"):
        fail(f"env: no identity or components: {env}")
    same = structured(await call(c, "diff_runs", {"a": pack, "b": pack}), "diff_runs same")
    if same["result"]["same"] is not True or same["exit_status"] != 0:
        fail(f"diff_runs of a pack with itself: {same}")
    other = structured(await call(c, "diff_runs", {"a": rec["run_id"], "b": pack}), "diff_runs other")
    if other["result"]["same"] is not False or other["exit_status"] != 1:
        fail(f"diff_runs of a run and a pack of other commands: {other}")
    out["env_identity"] = env["identity"]
    # A run that recorded nothing: a tool error naming the reason, not a crash.
    await refused(c, "env", {"target": run_id}, "records no environment")
    # A resource that does not exist is an error, not a crash.
    try:
        await c.read_resource("repro://runs/no-such-run/stdout")
        fail("reading a missing run's stdout succeeded")
    except MCPError as e:
        out["missing_resource"] = str(e)
    return out


async def scenario_refuse(c, workdir, bound):
    out = {}
    out["bind"] = await refused(c, "run", {"command": ["true"], "bind": ["/:/host:rw"]}, "unknown field `bind`")
    out["env"] = await refused(c, "run", {"command": ["true"], "env": ["HOME"]}, "unknown field `env`")
    out["network"] = await refused(c, "capture", {"command": ["true"], "network": "record"},
                                   "unknown field `network`")
    out["state_dir"] = await refused(c, "hunt", {"command": ["true"], "state_dir": "/"}, "unknown field `state_dir`")
    out["shell"] = await refused(c, "run", {"command": "echo hi; id"}, "invalid type")
    out["jobs"] = await refused(c, "hunt", {"command": ["true"], "jobs": 64}, "--max-jobs")
    out["attest"] = await refused(c, "attest", {"target": "last"}, "--attest-key")
    out["unknown_tool"] = await refused(c, "rm", {"path": "/"}, "unknown tool")
    # A value that looks like a flag stays a value: repro refuses the epoch, and no run happens.
    out["flag_value"] = await refused(c, "run", {"command": ["true"], "epoch": "--bind=/:/host"}, "--epoch")
    # Without the server's --bind, the guest does not see the file.
    if bound:
        r = structured(await call(c, "run", {"command": ["cat", bound]}), "run cat unbound")
        if r["result"]["exit_status"] == 0:
            fail(f"the guest read {bound} although the server has no --bind for it: {r}")
        out["unbound_exit"] = r["result"]["exit_status"]
    # The session still works after the refusals.
    ok = structured(await call(c, "run", {"command": ["true"]}), "run true")
    if ok["result"]["exit_status"] != 0:
        fail(f"run true: {ok}")
    return out


def processes_with(token):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if token.encode() in cmd:
            found.append((int(pid), cmd.replace(b"\0", b" ").decode(errors="replace")[:200]))
    return found


async def gone(token, seconds):
    """Waits until no process has `token` in its command line (at most `seconds`, else the scenario fails)."""
    with anyio.fail_after(seconds):
        while processes_with(token):
            await anyio.sleep(0.2)


async def scenario_cancel(c, workdir, _bound):
    token = "mcpcancel" + uuid.uuid4().hex[:12]
    # Each run busy-loops for a while (no system calls, so no logical time to skip); a hunt of 1000 of them runs
    # far longer than this test waits.
    script = f"i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; echo {token}"
    seen = []
    got = anyio.Event()

    async def progress(p, total, message):
        seen.append({"progress": p, "total": total, "message": message})
        got.set()

    before = []
    cancelled_at = None
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            async def hunt():
                await call(c, "hunt", {"command": ["sh", "-c", script], "max_runs": 1000, "jobs": 2,
                                       "vary": "seed", "seeds": "1000", "time_budget": "10m"}, progress)
                fail("the hunt ended before it was cancelled")
            tg.start_soon(hunt)
            with anyio.fail_after(90):
                await got.wait()
            before = processes_with(token)
            scope.cancel()
    if not seen:
        fail("hunt: no progress notification")
    if not before:
        fail(f"no process of the hunt ({token}) was running when it was cancelled: the check below would be empty")
    # Every process of the call goes away: the hunt, its runs, their sandboxes.
    await gone(token, 40)
    # The session still answers.
    ok = structured(await call(c, "run", {"command": ["sh", "-c", "echo after"]}), "run after cancel")
    if (await read_text(c, ok["runs"][0]["stdout"])) != "after\n":
        fail("run after cancel: wrong stdout")
    return {"progress": seen, "processes_before": len(before), "token": token}


async def scenario_http(c, workdir, bound):
    out = await scenario_tools(c, workdir, bound)
    r = structured(await call(c, "run", {"command": ["sh", "-c", "echo over-http"]}), "run over http")
    text = await read_text(c, r["runs"][0]["stdout"])
    if text != "over-http\n":
        fail(f"run over http: stdout {text!r}")
    out["run_id"] = r["run_id"]
    out["bind"] = await refused(c, "run", {"command": ["true"], "bind": ["/"]}, "unknown field `bind`")
    return out


async def scenario_analysis(c, workdir, _bound):
    """explain, shrink, attest (the server has --attest-key) and a call stopped by its timeout_secs."""
    out = {}
    # explain: a command whose outcome the seed decides (the guest's /dev/urandom is the seeded stream).
    script = "test $(od -An -N1 -tu1 /dev/urandom) -lt 128 || { echo odd >&2; exit 1; }"
    ex = structured(await call(c, "explain", {"command": ["sh", "-c", script], "vary": "seed", "seeds": "8",
                                              "jobs": 2}), "explain")["result"]
    seed = [f for f in ex["findings"] if f["dimension"] == "seed"]
    if not seed or seed[0]["changes_outcome"] is not True or not seed[0]["deciding_values"]:
        fail(f"explain: the seed should decide the outcome: {ex}")
    if ex["control_runs"] < 1 or ex["nondeterministic"] is not False:
        fail(f"explain: control runs: {ex}")
    out["explain_deciding"] = seed[0]["deciding_values"]

    # shrink: a pack of a failing command, shrunk (its environment is not needed to fail).
    cap = structured(await call(c, "capture", {"command": ["sh", "-c", "echo found >&2; exit 4"]}), "capture")
    pack = cap["result"]["pack"]
    sh = structured(await call(c, "shrink", {"pack": pack, "confirm": 1}), "shrink")["result"]
    if not os.path.isfile(sh["output"]) or sh["after"]["env_vars"] >= sh["before"]["env_vars"]:
        fail(f"shrink: no smaller pack: {sh}")
    out["pack"] = pack
    out["shrunk"] = sh["output"]

    # attest: a test-result statement about the pack, signed with the server's key.
    at = structured(await call(c, "attest", {"target": pack, "predicate": "test-result"}), "attest")["result"]
    if at.get("payloadType") != "application/vnd.in-toto+json" or not at.get("signatures"):
        fail(f"attest: not a DSSE envelope: {at}")
    out["envelope"] = at

    # timeout_secs: a guest that busy-loops is stopped with every process of the call.
    token = "mcptimeout" + uuid.uuid4().hex[:12]
    loop = f"while :; do :; done; echo {token}"
    r = await call(c, "run", {"command": ["sh", "-c", loop], "timeout_secs": 2})
    if not r.is_error or (r.structured_content or {}).get("timed_out") is not True:
        fail(f"run timeout_secs=2: not a timed-out tool error: {r}")
    await gone(token, 30)
    out["timeout_error"] = r.structured_content["error"]
    return out


SCENARIOS = {"tools": scenario_tools, "runs": scenario_runs, "refuse": scenario_refuse, "cancel": scenario_cancel,
             "http": scenario_http, "analysis": scenario_analysis}


async def main():
    scenario, server, workdir = sys.argv[1], sys.argv[2], sys.argv[3]
    bound = sys.argv[4] if len(sys.argv) > 4 else None
    with anyio.fail_after(110):
        async with client_for(server, workdir) as c:
            out = await SCENARIOS[scenario](c, workdir, bound)
    print(json.dumps(out))


if __name__ == "__main__":
    anyio.run(main)
