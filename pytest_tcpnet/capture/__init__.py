"""Packet capture on a lab path: tshark/dumpcap in a namespace, decoded with tshark's own dissectors."""
