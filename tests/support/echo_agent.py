"""An agent for ``--agent subprocess:``: answers the prompt on stdin with
``answer to <prompt>``, after ``ECHO_AGENT_DELAY`` seconds (default none)."""

import os
import sys
import time

prompt = sys.stdin.read()
time.sleep(float(os.environ.get("ECHO_AGENT_DELAY", "0")))
sys.stdout.write(f"answer to {prompt}")
