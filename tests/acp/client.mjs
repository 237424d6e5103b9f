// The reference TypeScript ACP client (@agentclientprotocol/sdk 2.4) against `oi-lsp acp`:
// prompt → the model's reasoning as agent_thought_chunk → permission (allow) → output → end_turn; reject; cancel during a 30 s run; then
// session/load in a new process replays the history; with OI_TEST_MCP_MEMORY (server-memory's
// script), a session whose mcpServers the model's code calls, each call a tool call of its own.
// Exits non-zero on the first failure.
// Usage: node client.mjs <workspace> <command> [args...] (the model is scripted by pytest).
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import assert from "node:assert/strict";
import { client, ndJsonStream } from "@agentclientprotocol/sdk";

const [workspace, command, ...args] = process.argv.slice(2);

function start(choices) {
  const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
  const state = { updates: [], asked: [], choices, waiters: [] };
  const changed = () => state.waiters.splice(0).forEach((w) => w());
  const app = client({ name: "oi-lsp-test" })
    .onRequest("session/request_permission", async ({ params, signal }) => {
      state.asked.push(params);
      changed();
      const choice = state.choices.shift() ?? "hold";
      if (choice === "hold") {  // held until the turn is cancelled, then answered so
        await new Promise((resolve) => { state.release = resolve; signal.addEventListener("abort", resolve); });
        return { outcome: { outcome: "cancelled" } };
      }
      return { outcome: { outcome: "selected", optionId: choice } };
    })
    .onNotification("session/update", ({ params }) => {
      state.updates.push(params.update);
      changed();
    });
  const stream = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  return { child, app, stream, state };
}

const until = (state, check, ms = 30000) => new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error("timed out waiting")), ms);
  const look = () => (check() ? (clearTimeout(timer), resolve()) : state.waiters.push(look));
  look();
});
const texts = (state, kind) => state.updates.filter((u) => u.sessionUpdate === kind)
  .map((u) => u.content?.text ?? "").join("");
const toolText = (state) => state.updates
  .filter((u) => u.sessionUpdate === "tool_call" || u.sessionUpdate === "tool_call_update")
  .flatMap((u) => u.content ?? []).map((c) => c.content?.text ?? "").join("\n");
const finals = (state) => state.updates
  .filter((u) => u.sessionUpdate === "tool_call_update" && ["completed", "failed"].includes(u.status))
  .map((u) => u.status);

async function firstRun() {
  const { child, app, stream, state } = start(["allow_once", "reject_once", "allow_once"]);
  const sessionId = await app.connectWith(stream, async (ctx) => {
    const init = await ctx.request("initialize", { protocolVersion: 1, clientCapabilities: {} });
    assert.equal(init.agentCapabilities.loadSession, true);
    const { sessionId, modes } = await ctx.request("session/new", { cwd: workspace, mcpServers: [] });
    assert.equal(modes.currentModeId, "ask");

    let done = await ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "say hello" }] });
    assert.equal(done.stopReason, "end_turn");
    assert.match(toolText(state), /hello from node/);
    assert.match(texts(state, "agent_message_chunk"), /Done hello\./);
    assert.equal(texts(state, "agent_thought_chunk"), "I will print a greeting.");
    assert.doesNotMatch(texts(state, "agent_message_chunk"), /greeting/);
    assert.deepEqual(state.asked[0].options.map((o) => o.kind), ["allow_once", "allow_always", "allow_always", "reject_once"]);
    assert.equal(state.updates.find((u) => u.sessionUpdate === "tool_call").kind, "execute");
    assert.deepEqual(finals(state), ["completed"]);

    done = await ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "again" }] });
    assert.equal(done.stopReason, "end_turn");
    assert.deepEqual(finals(state), ["completed", "failed"]);

    const started = Date.now();
    const turn = ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "sleep" }] });
    await until(state, () => /sleeping/.test(toolText(state).replace("print('sleeping'", "")));
    await ctx.notify("session/cancel", { sessionId });
    done = await turn;
    assert.equal(done.stopReason, "cancelled");
    assert.ok(Date.now() - started < 20000, "the 30 s run was stopped");
    assert.deepEqual(finals(state), ["completed", "failed", "failed"]);
    return sessionId;
  });
  child.stdin.end();
  await new Promise((resolve) => child.on("exit", resolve));
  return sessionId;
}

async function load(sessionId) {
  const { child, app, stream, state } = start([]);
  await app.connectWith(stream, async (ctx) => {
    await ctx.request("initialize", { protocolVersion: 1, clientCapabilities: {} });
    await ctx.request("session/load", { sessionId, cwd: workspace, mcpServers: [] });
    const users = texts(state, "user_message_chunk");
    assert.match(users, /say hello/);
    assert.match(users, /sleep/);
    assert.match(toolText(state), /hello from node/);
    assert.equal(texts(state, "agent_thought_chunk"), "I will print a greeting.");
    assert.equal(state.updates.filter((u) => u.sessionUpdate === "tool_call").length, 3);
  });
  child.stdin.end();
  await new Promise((resolve) => child.on("exit", resolve));
}

async function mcp(script) {
  const { child, app, stream, state } = start(["allow_once"]);
  await app.connectWith(stream, async (ctx) => {
    await ctx.request("initialize", { protocolVersion: 1, clientCapabilities: {} });
    const { sessionId } = await ctx.request("session/new", { cwd: workspace, mcpServers: [{
      name: "memory", command: process.execPath, args: [script],
      env: [{ name: "MEMORY_FILE_PATH", value: `${workspace}/../memory.jsonl` }] }] });
    const done = await ctx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "remember" }] });
    assert.equal(done.stopReason, "end_turn");
    const calls = state.updates.filter((u) => u.toolCallId?.startsWith("mcp-"));
    const started = calls.filter((u) => u.sessionUpdate === "tool_call");
    assert.deepEqual(started.map((u) => u.title), ["memory.create_entities", "memory.read_graph"]);
    assert.deepEqual(started.map((u) => u.status), ["in_progress", "in_progress"]);
    assert.equal(started[0].rawInput.entities[0].name, "typescript");
    assert.deepEqual(calls.filter((u) => u.sessionUpdate === "tool_call_update").map((u) => u.status),
      ["completed", "completed"]);
    assert.match(toolText(state), /entities: 1/);
    console.log("mcp ok");
  });
  child.stdin.end();
  await new Promise((resolve) => child.on("exit", resolve));
}

const sessionId = await firstRun();
await load(sessionId);
if (process.env.OI_TEST_MCP_MEMORY) await mcp(process.env.OI_TEST_MCP_MEMORY);
console.log(`ok ${sessionId}`);
process.exit(0);
