"""`python -m cachewarm ...` runs the CLI (what `make demo` uses, independent of PATH)."""

from cachewarm.cli import main

if __name__ == "__main__":
    main()
