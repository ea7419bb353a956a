# free_port.bash - sourced by tests/integration/lib.sh and the benchmarks'
# own run scripts, which start heads on loopback ports of their own.
# free_port picks a loopback TCP port nobody listens on, below the kernel's
# ephemeral range (32768-60999 by default): a port in that range can be the
# local end of any outgoing connection on the machine (a CLI or agent of a
# parallel test, say), which nobody listens on yet bind() refuses
# ("cannot listen: ... Address in use").
free_port() {
    local p lo=32768 hi=60999 base=20000 span=12768
    read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
    if [ "$lo" -gt 21000 ]; then span=$((lo - 20000)); elif [ "$hi" -lt 64535 ]; then base=$((hi + 1)); span=$((65535 - hi)); fi
    for _ in $(seq 1 50); do
        p=$((base + RANDOM % span))
        if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null; then echo $p; return; fi
    done
    echo "no free port found" >&2; return 1
}
