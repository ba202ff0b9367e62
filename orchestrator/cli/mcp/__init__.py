"""``orchestrate mcp``: a host's and a subagent's way in, as an MCP server.

An MCP server (the optional extra ``mcp``: the official MCP Python SDK, imported only
once the command runs) over stdio, or streamable HTTP on loopback under an access token,
over the same run stores as the other commands: start runs, list their pending requests
with the answer's schema, answer them through the answer gate, resume; and, for a
subagent on a task board, its packet, heartbeats, worklog and submit through the gateway.

- ``tool_schemas``: the tools' names (the contract), descriptions and input schemas;
- ``run_tools``: the run tools, over the ``RunStore`` port;
- ``board_tools``: the task board tools, over the boards of the served stores;
- ``server``: the MCP server (tools, resources, the "host loop" prompt, notifications);
- ``command``: the command.

Part of the cli wing: it may import what the cli may.
"""
