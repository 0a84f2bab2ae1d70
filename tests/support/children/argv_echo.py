#!/usr/bin/env python3
"""Test stand-in for the codex binary: records its argv, then echoes like echo_rpc."""
import json
import os
import runpy
import sys

with open(os.environ["ARGV_ECHO_LOG"], "w") as f:
    json.dump(sys.argv[1:], f)
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "echo_rpc.py"), run_name="__main__")
