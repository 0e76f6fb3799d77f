"""Command line: python -m chunkup serve|upload ... (see the package docstring)."""

import argparse

from . import serve, upload


def main(argv=None):
    parser = argparse.ArgumentParser(prog="chunkup", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    server = commands.add_parser("serve", help="take uploads, acknowledging each chunk")
    server.add_argument("address")
    server.add_argument("port", type=int)
    server.add_argument("--rcvbuf", type=int, help="SO_RCVBUF of the accepted sockets (bytes)")
    server.add_argument("--once", action="store_true", help="exit after one upload")
    client = commands.add_parser("upload", help="upload NBYTES, print the seconds it took")
    client.add_argument("address")
    client.add_argument("port", type=int)
    client.add_argument("nbytes", type=int)
    client.add_argument("--chunk", type=int, default=65536)
    client.add_argument("--window", type=int, default=4, help="chunks outstanding without an acknowledgement")
    client.add_argument("--sndbuf", type=int, help="SO_SNDBUF (bytes)")
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(args.address, args.port, rcvbuf=args.rcvbuf, once=args.once)
    else:
        print(
            f"{upload(args.address, args.port, args.nbytes, chunk=args.chunk, window=args.window, sndbuf=args.sndbuf):.3f}"
        )


if __name__ == "__main__":
    main()
