"""``python -m pytest_tcpnet doctor``: what this machine can do for pytest-tcpnet (doctor.py)."""

import sys


def main(argv=None) -> int:
    """Dispatch the one subcommand; usage on anything else."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["doctor"] and len(argv) == 1:
        from .doctor import main as doctor

        return doctor()
    sys.stderr.write(
        "usage: python -m pytest_tcpnet doctor\n"
        "  doctor  what this machine can do (privilege, qdiscs, tools, kernels and backends for "
        "--tcpnet-vm) and the command that fixes each gap\n"
        "(reports: python -m pytest_tcpnet.report --help)\n"
    )
    return 0 if argv[:1] in (["-h"], ["--help"]) else 2


if __name__ == "__main__":
    sys.exit(main())
