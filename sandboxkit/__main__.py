"""`python -m sandboxkit`, the same as the `sandboxkit` console script."""

from sandboxkit.cli import main

if __name__ == "__main__":
    main()
