# Helpers for the test host's scenario (/hostvm/scenario, written by tools/mvmm-hostvm). Installed at
# /lib/mvmm/hostvm.sh; sourced, never run.

# hostvm_disk DEV SERIAL: fails unless /dev/DEV is the outer disk given serial=SERIAL (disk order check).
hostvm_disk() {
	if [ "$(cat "/sys/block/$1/serial" 2>/dev/null)" != "$2" ]; then
		echo "mvmm-hostvm: /dev/$1 is not the outer disk $2 (test host's disks: $(disks | tr '\n' ' '))"
		return 1
	fi
}

# hostvm_exec COMMAND [ARG...]: prints "MVMM-HOSTVM-EXEC <uptime> <command>" then runs the command; returns its
# exit code. The outer side times the console lines that follow from this line.
hostvm_exec() {
	hostvm_announce "$1"
	"$@"
}

# hostvm_announce PROGRAM: only the MVMM-HOSTVM-EXEC line, for a program the scenario starts itself (e.g. a
# subshell that execs it in the background, so that $! is the program's pid).
hostvm_announce() {
	read -r _up _ </proc/uptime
	echo "MVMM-HOSTVM-EXEC $_up $1"
}
