"""Peers side by side: other agent servers driven by the same closed loop against the same mock.

`agentos bench sweep --peers agno,opencode,langgraph` starts each installed peer pointed at the
sweep's mock provider and measures it at the same points as Agent OS and the direct row, into the
same report.
A peer lives outside Agent OS's dependencies, in a directory of its own (`--peers-dir`, default
`~/.cache/agentos-bench/peers`): `agentos bench peers` says which are installed and how to install
the others. A peer that is not installed is reported "not measured", with the install commands.
"""
