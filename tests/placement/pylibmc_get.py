"""Run by Debian's python3 (python3-pylibmc): reads keys back through libmemcached.

argv[1]: JSON {"servers": [...], "behaviors": {...}}; stdin: keys in hex, one a line.
Prints the hex of every key libmemcached does not find, one a line.
"""

import json
import sys

import pylibmc

conf = json.loads(sys.argv[1])
mc = pylibmc.Client(conf["servers"], behaviors=conf["behaviors"])
keys = [bytes.fromhex(line.strip()) for line in sys.stdin if line.strip()]
found = {}
for i in range(0, len(keys), 100):
    found.update(mc.get_multi(keys[i : i + 100]))
print("\n".join(k.hex() for k in keys if k not in found))
