"""Codex 0.169.0 app-server frames for the decoding and translation tests.

``REAL`` frames were captured from the real codex binary driven by
``tools/fake_model.py``: the scenarios of ``tools/scenarios.py``, plus one run
whose fake model emitted a reasoning item, a failing shell command, a web
search, an ``apply_patch`` command and whose client sent an image. Ids,
paths and timestamps are as Codex sent them; one host-specific stderr line
was removed from a command's output.

``SCHEMA_BUILT`` frames cover what the fake model cannot make Codex emit
(an MCP tool call, a plan, item types this project does not model). They
follow ``codex app-server generate-json-schema``; ``tests/protocol/test_codex_types.py``
validates every sample here against that schema when the binary exists.
"""

from __future__ import annotations

import copy
import json
from typing import Any

_REAL = {
    'turn/started': r'''{"method":"turn/started","params":{"threadId":"01a20135-0754-7433-a031-c6422a39e7a0","turn":{"id":"01a20135-076a-7871-a133-d39f6181fa8c","rootTurnId":"01a20135-076a-7871-a133-d39f6181fa8c","items":[],"itemsView":"notLoaded","status":"inProgress","error":null,"startedAt":1795316582,"completedAt":null,"durationMs":null}},"emittedAtMs":1795316582280}''',
    'item/started': r'''{"method":"item/started","params":{"item":{"type":"userMessage","id":"01a20135-0795-7fb0-9bda-6fffc6196de6","clientId":null,"content":[{"type":"text","text":"Do things.","text_elements":[]}],"startedAtMs":1795316582294,"completedAtMs":null},"threadId":"01a20135-0754-7433-a031-c6422a39e7a0","turnId":"01a20135-076a-7871-a133-d39f6181fa8c","startedAtMs":1795316582294},"emittedAtMs":1795316582295}''',
    'userMessage': r'''{"method":"item/completed","params":{"item":{"type":"userMessage","id":"01a20135-0795-7fb0-9bda-6fffc6196de6","clientId":null,"content":[{"type":"text","text":"Do things.","text_elements":[]}],"startedAtMs":1795316582294,"completedAtMs":1795316582294},"threadId":"01a20135-0754-7433-a031-c6422a39e7a0","turnId":"01a20135-076a-7871-a133-d39f6181fa8c","contentTokenCount":null,"completedAtMs":1795316582294},"emittedAtMs":1795316582298}''',
    'reasoning': r'''{"method":"item/completed","params":{"item":{"type":"reasoning","id":"rs_1","summary":["**Plan**\n\nI should check.","Second part."],"content":["raw thoughts"],"startedAtMs":1795316582345,"completedAtMs":1795316582345},"threadId":"01a20135-0754-7433-a031-c6422a39e7a0","turnId":"01a20135-076a-7871-a133-d39f6181fa8c","contentTokenCount":null,"completedAtMs":1795316582345},"emittedAtMs":1795316582351}''',
    'commandExecution_failed': r'''{"method":"item/completed","params":{"item":{"type":"commandExecution","id":"call_fail_1","pluginId":null,"scriptPath":null,"command":"/bin/bash -lc 'echo oops; exit 3'","cwd":"/tmp/tmpz8_hny1j/work","processId":"50557","source":"unifiedExecStartup","status":"failed","commandActions":[{"type":"unknown","command":"echo oops; exit 3"}],"aggregatedOutput":"oops\n","exitCode":3,"durationMs":344,"startedAtMs":1795316582544,"completedAtMs":1795316582889},"threadId":"01a20135-0754-7433-a031-c6422a39e7a0","turnId":"01a20135-076a-7871-a133-d39f6181fa8c","contentTokenCount":null,"completedAtMs":1795316582889},"emittedAtMs":1795316582892}''',
    'thread/tokenUsage/updated': r'''{"method":"thread/tokenUsage/updated","params":{"threadId":"01a20135-0754-7433-a031-c6422a39e7a0","turnId":"01a20135-076a-7871-a133-d39f6181fa8c","tokenUsage":{"total":{"totalTokens":5331,"inputTokens":5326,"cachedInputTokens":0,"cacheWriteInputTokens":0,"outputTokens":5,"reasoningOutputTokens":0},"last":{"totalTokens":5331,"inputTokens":5326,"cachedInputTokens":0,"cacheWriteInputTokens":0,"outputTokens":5,"reasoningOutputTokens":0},"modelContextWindow":258400}},"emittedAtMs":1795316582896}''',
    'webSearch': r'''{"method":"item/completed","params":{"item":{"type":"webSearch","id":"ws_1","query":"weather paris","action":{"type":"search","query":"weather paris","queries":null},"results":null,"startedAtMs":1795316582968,"completedAtMs":1795316582969},"threadId":"01a20135-0754-7433-a031-c6422a39e7a0","turnId":"01a20135-076a-7871-a133-d39f6181fa8c","contentTokenCount":null,"completedAtMs":1795316582969},"emittedAtMs":1795316582974}''',
    'fileChange': r'''{"method":"item/completed","params":{"item":{"type":"fileChange","id":"call_patch_1","changes":[{"path":"/tmp/tmpz8_hny1j/work/hello.txt","kind":{"type":"add"},"diff":"hello world\n"}],"status":"completed","startedAtMs":1795316582984,"completedAtMs":1795316583112},"threadId":"01a20135-0754-7433-a031-c6422a39e7a0","turnId":"01a20135-076a-7871-a133-d39f6181fa8c","contentTokenCount":null,"completedAtMs":1795316583112},"emittedAtMs":1795316583117}''',
    'agentMessage': r'''{"method":"item/completed","params":{"item":{"type":"agentMessage","moderation":null,"id":"msg_fake_3","text":"Done.","phase":null,"memoryCitation":null,"delivery":null,"questions":null,"startedAtMs":1795316583192,"completedAtMs":1795316583193},"threadId":"01a20135-0754-7433-a031-c6422a39e7a0","turnId":"01a20135-076a-7871-a133-d39f6181fa8c","contentTokenCount":null,"completedAtMs":1795316583193},"emittedAtMs":1795316583195}''',
    'turn/completed:completed': r'''{"method":"turn/completed","params":{"threadId":"01a20135-0754-7433-a031-c6422a39e7a0","turn":{"id":"01a20135-076a-7871-a133-d39f6181fa8c","rootTurnId":"01a20135-076a-7871-a133-d39f6181fa8c","items":[{"type":"agentMessage","moderation":null,"id":"msg_fake_3","text":"Done.","phase":null,"memoryCitation":null,"delivery":null,"questions":null,"startedAtMs":1795316583192,"completedAtMs":1795316583193}],"itemsView":"summary","status":"completed","error":null,"startedAt":1795316582,"completedAt":1795316583,"durationMs":948}},"emittedAtMs":1795316583212}''',
    'userMessage_image': r'''{"method":"item/completed","params":{"item":{"type":"userMessage","id":"01a20135-0b54-7a00-8972-1ea1878fcecd","clientId":null,"content":[{"type":"text","text":"Look at this","text_elements":[]},{"type":"image","url":"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAA=","detail":null}],"startedAtMs":1795316583257,"completedAtMs":1795316583257},"threadId":"01a20135-0754-7433-a031-c6422a39e7a0","turnId":"01a20135-0b31-7c81-9f17-9b563afdb5ca","contentTokenCount":null,"completedAtMs":1795316583257},"emittedAtMs":1795316583261}''',
    'commandExecution': r'''{"method":"item/completed","params":{"item":{"type":"commandExecution","id":"call_approval_1","pluginId":null,"scriptPath":null,"command":"/bin/bash -c 'printf approved-by-client > approved.txt && cat approved.txt'","cwd":"/tmp/tmphhpk_bsv/work","processId":"20738","source":"unifiedExecStartup","status":"completed","commandActions":[{"type":"unknown","command":"printf approved-by-client > approved.txt && cat approved.txt"}],"aggregatedOutput":"approved-by-client","exitCode":0,"durationMs":0,"startedAtMs":1795316294251,"completedAtMs":1795316294303},"threadId":"01a20130-a11e-71b3-afb4-baf48a693a47","turnId":"01a20130-a140-7fd0-aacd-e688ff1043b9","contentTokenCount":null,"completedAtMs":1795316294303},"emittedAtMs":1795316294306}''',
    'dynamicToolCall': r'''{"method":"item/completed","params":{"item":{"type":"dynamicToolCall","id":"call_weather_1","namespace":null,"tool":"get_weather","arguments":{"city":"Paris"},"status":"completed","contentItems":[{"type":"inputText","text":"Paris: 21C and sunny"}],"success":true,"durationMs":2,"startedAtMs":1795316296406,"completedAtMs":1795316296408},"threadId":"01a20130-a9f7-73d0-8859-e8c7e969d990","turnId":"01a20130-aa11-7112-b1c1-4733a4021d14","contentTokenCount":null,"completedAtMs":1795316296408},"emittedAtMs":1795316296411}''',
    'contextCompaction': r'''{"method":"item/completed","params":{"item":{"type":"contextCompaction","id":"01a20130-b7a1-7923-a0d2-bcdf98f55e97","startedAtMs":1795316299681,"completedAtMs":1795316299764},"threadId":"01a20130-b621-7762-84d3-58b1b99ea0c7","turnId":"01a20130-b796-7a83-b2b3-1eae6e083704","contentTokenCount":null,"completedAtMs":1795316299764},"emittedAtMs":1795316299769}''',
    'turn/completed:failed': r'''{"method":"turn/completed","params":{"threadId":"01a20130-c4f5-7f70-8197-bb99e597e026","turn":{"id":"01a20130-c514-7ca2-8bc7-12d1bc744707","rootTurnId":"01a20130-c514-7ca2-8bc7-12d1bc744707","items":[],"itemsView":"notLoaded","status":"failed","error":{"message":"stream disconnected before completion: scenario model failure","codexErrorInfo":"other","additionalDetails":null,"misalignment":null},"startedAt":1795316303,"completedAt":1795316303,"durationMs":176}},"emittedAtMs":1795316303318}''',
    'turn/completed:interrupted': r'''{"method":"turn/completed","params":{"threadId":"01a20130-b0f6-79c2-97cf-ddf628e41060","turn":{"id":"01a20130-b113-7182-860f-4a79e09021a6","rootTurnId":"01a20130-b113-7182-860f-4a79e09021a6","items":[],"itemsView":"notLoaded","status":"interrupted","error":null,"startedAt":1795316298,"completedAt":1795316298,"durationMs":202}},"emittedAtMs":1795316298210}''',
    'thread/start': r'''{"id":2,"method":"thread/start","params":{"cwd":"/tmp/tmpenjm26x4/work","developerInstructions":"Scenario developer instructions: answer briefly.","dynamicTools":[{"type":"function","name":"get_weather","description":"Current weather for a city.","inputSchema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}}]}}''',
    'turn/start': r'''{"id":3,"method":"turn/start","params":{"threadId":"01a20130-a9f7-73d0-8859-e8c7e969d990","input":[{"type":"text","text":"What is the weather in Paris?","text_elements":[]}]}}''',
    'thread/compact/start': r'''{"id":5,"method":"thread/compact/start","params":{"threadId":"01a20130-b621-7762-84d3-58b1b99ea0c7"}}''',
    'thread/resume': r'''{"id":2,"method":"thread/resume","params":{"threadId":"01a20130-bdeb-7ff0-910a-6590ab5eae49","cwd":"/tmp/tmphob5tipe/work","developerInstructions":"Scenario developer instructions: answer briefly."}}''',
}

_SCHEMA_BUILT = {
    "mcpToolCall": {
        "method": "item/completed",
        "params": {
            "item": {
                "type": "mcpToolCall",
                "id": "call_mcp_1",
                "server": "docs",
                "tool": "search",
                "status": "completed",
                "arguments": {"query": "trio nurseries", "limit": 2},
                "result": {
                    "content": [
                        {"type": "text", "text": "Nurseries own tasks."},
                        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
                        {"type": "resource", "resource": {"uri": "doc://1"}},
                    ],
                    "structuredContent": None,
                },
                "error": None,
                "durationMs": 12,
                "appContext": None,
                "mcpAppResourceUri": None,
                "mcpAppUi": None,
                "pluginId": None,
                "readOnlyHint": True,
            },
            "threadId": "thread-mcp",
            "turnId": "turn-mcp",
            "completedAtMs": 1795316600000,
        },
    },
    "mcpToolCall_error": {
        "method": "item/completed",
        "params": {
            "item": {
                "type": "mcpToolCall",
                "id": "call_mcp_2",
                "server": "docs",
                "tool": "fetch",
                "status": "failed",
                "arguments": None,
                "result": None,
                "error": {"message": "server unavailable"},
                "durationMs": 3,
            },
            "threadId": "thread-mcp",
            "turnId": "turn-mcp",
            "completedAtMs": 1795316600001,
        },
    },
    "dynamicToolCall_failed": {
        "method": "item/completed",
        "params": {
            "item": {
                "type": "dynamicToolCall",
                "id": "call_weather_2",
                "namespace": "weather",
                "tool": "get_weather",
                "arguments": {"city": "Atlantis"},
                "status": "completed",
                "contentItems": [
                    {"type": "inputText", "text": "unknown city"},
                    {"type": "inputImage", "imageUrl": "data:image/png;base64,iVBORw0KGgo="},
                ],
                "success": False,
                "durationMs": 1,
            },
            "threadId": "thread-dyn",
            "turnId": "turn-dyn",
            "completedAtMs": 1795316600002,
        },
    },
    "plan": {
        "method": "item/completed",
        "params": {
            "item": {"type": "plan", "id": "plan_1", "text": "1. Read\n2. Write"},
            "threadId": "thread-plan",
            "turnId": "turn-plan",
            "completedAtMs": 1795316600003,
        },
    },
    "imageView": {
        "method": "item/completed",
        "params": {
            "item": {"type": "imageView", "id": "view_1", "path": "/tmp/x.png"},
            "threadId": "thread-other",
            "turnId": "turn-other",
            "completedAtMs": 1795316600004,
        },
    },
    "userMessage_inputs": {
        "method": "item/completed",
        "params": {
            "item": {
                "type": "userMessage",
                "id": "user_inputs_1",
                "clientId": None,
                "content": [
                    {
                        "type": "text",
                        "text": "Use $review on @main",
                        "text_elements": [{"byteRange": {"start": 4, "end": 11}, "placeholder": "$review"}],
                    },
                    {"type": "image", "url": "https://example.com/cat.png", "detail": "low"},
                    {"type": "image", "fileId": "file_123"},
                    {"type": "localImage", "path": "/home/u/shot.png", "detail": None},
                    {"type": "skill", "name": "review", "path": "/skills/review/SKILL.md"},
                    {"type": "mention", "name": "main", "path": "app://repo/main"},
                    {"type": "localAudio", "path": "/tmp/a.wav"},
                ],
            },
            "threadId": "thread-inputs",
            "turnId": "turn-inputs",
            "completedAtMs": 1795316600005,
        },
    },
    "turn/start_projected": {
        "id": 9,
        "method": "turn/start",
        "params": {
            "threadId": "thread-proj",
            "input": [{"type": "text", "text": "projected text", "text_elements": []}],
            "additionalContext": {"openclaw": {"kind": "application", "value": "ctx"}},
            "model": "gpt-test",
            "cwd": "/w",
        },
    },
}

REAL: dict[str, dict[str, Any]] = {name: json.loads(text) for name, text in _REAL.items()}
SCHEMA_BUILT: dict[str, dict[str, Any]] = _SCHEMA_BUILT
ALL: dict[str, dict[str, Any]] = {**REAL, **SCHEMA_BUILT}


def frame(name: str) -> dict[str, Any]:
    """A fresh deep copy of one sample frame (tests may mutate it)."""
    return copy.deepcopy(ALL[name])


def item(name: str) -> dict[str, Any]:
    """The thread item of an ``item/completed`` sample (a fresh copy)."""
    return frame(name)["params"]["item"]


def item_frames() -> dict[str, dict[str, Any]]:
    """Every ``item/completed`` sample, by name."""
    return {k: copy.deepcopy(v) for k, v in ALL.items() if v.get("method") == "item/completed"}
