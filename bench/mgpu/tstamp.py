# tstamp.py CMD...: run CMD, prefix each line of its output with seconds since exec.
import subprocess, sys, time
t0 = time.time()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
for line in p.stdout:
    sys.stdout.write("+%7.3f %s" % (time.time() - t0, line))
rc = p.wait()
print("+%7.3f exit %d" % (time.time() - t0, rc))
