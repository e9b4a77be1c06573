"""`python -m cachewarm ...` runs the CLI (what `make demo` uses, independent of PATH)."""

from cachewarm.cli import run

if __name__ == "__main__":
    run()
