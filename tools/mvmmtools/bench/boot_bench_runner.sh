# shellcheck shell=sh
# The test host side of tools/boot-bench: helpers that tools/boot-bench puts in front of the run list it writes
# for `mvmm-hostvm --script`. Runs inside the test host (busybox sh, awk); every line it prints starts with
# BOOTBENCH- and carries the test host's /proc/uptime (10 ms steps), so the times are measured inside the test
# host, free of the console relay's delay.
#
#   BOOTBENCH-BEGIN TAG <uptime>                 just before the VMM is started (fork + exec)
#   BOOTBENCH-LINE TAG <uptime> <line>           a line of the VMM's output that matters (markers, first KVM_RUN,
#                                                exit stats, errors, a guest's crash or stall: $BB_KEEP), with
#                                                the uptime at which awk read it
#   BOOTBENCH-MEM TAG hwm_kib=N guest_kib=N mapping_kib=N guest_thp_kib=N heap_rss_kib=N heap_size_kib=N
#                 arena_rss_kib=N arena_size_kib=N arenas=N
#                                                read when the guest printed its poweroff marker, or the line
#                                                $BB_MEM_AT matches (the VMM is still running): VmHWM, the Rss of
#                                                the VMM's largest mapping (guest RAM) with that mapping's size and
#                                                its AnonHugePages (in transparent huge pages), its
#                                                [heap] mapping's Rss and Size (glibc's main arena), and the Rss
#                                                and Size of glibc's other arenas (those of threads that malloc)
#   BOOTBENCH-CPU TAG <uptime> io-start|io ticks=N <tid>:<name>:<ticks> ...
#                                                at the guest's io-start and io markers (boot-bench --io): the CPU
#                                                time the VMM used so far (utime + stime, clock ticks; its ended
#                                                threads' included), then each of its threads with its name (spaces
#                                                as _) and its own, io_uring's workers too
#   BOOTBENCH-END TAG <uptime> <exit code> <hung 0|1>
#   BOOTBENCH-THREAD TAG <tid> <name> <state> wchan=.. stack: ..
#                                                per thread of a VMM that hangs, before it is killed: where each
#                                                thread waits (kernel stack), e.g. a vCPU halted in the guest
#                                                (kvm_vcpu_halt) or blocked in the VMM (futex_wait)
#   BOOTBENCH-PERF TAG <line>                    with BB_PERF set (boot-bench --perf), after the run: the perf
#                                                report of the VMM from the line $BB_PERF_AT matches (the guest's
#                                                init or, with --io, io-start marker) to its exit: the samples per
#                                                thread name, then per name and symbol
#   BOOTBENCH-TAIL TAG <line>                    the VMM's last output lines, after a failed run
#   BOOTBENCH-REPORT TAG <json>                  mvmm's --report document ($BB_DIR/TAG.report.json), on one line
#   BOOTBENCH-HOSTIO <mvmm-io's line>            bb_host_io: the guest's reads of the first disk, done by the test
#                                                host itself on its file or delayed device (the host-side limit
#                                                of boot-bench --io)
#   BOOTBENCH-ERROR <text>                       the runner itself failed (no disk images, ...)

BB_DIR=/tmp/boot-bench
# Where the VMM's /proc/<pid> is read (a test points it at a recorded smaps).
BB_PROC=${BB_PROC:-/proc}
# Where dmsetup's devices appear (a test points it at a folder of its own).
BB_MAPPER=${BB_MAPPER:-/dev/mapper}
# The guest's line at which the VMM's memory is read (boot-bench --io: the io-bench script's io-done marker, after
# which the guest idles a moment; at the poweroff marker a VMM that exits fast may have unmapped guest RAM already).
BB_MEM_AT=${BB_MEM_AT:-MVMM-MARK poweroff}
# The lines bb_stamp passes on: markers and mvmm's figures, mvmm's errors and warnings, and what a guest kernel
# prints when it crashes or stalls (with `quiet` the console shows errors and worse).
BB_KEEP='MVMM-MARK|first KVM_RUN|exit stats:|[[](error|critical|warning)[]]|rcu: |[Ss]tall|blocked for more than|'\
'soft lockup|LOCKUP|Kernel panic|BUG:|Oops|general protection|timer wakeup|Call Trace|RIP:|triple'
mkdir -p "$BB_DIR" || echo "BOOTBENCH-ERROR cannot create $BB_DIR"

# bb_disks N MIB [FILLER]: N raw images $BB_DIR/disk0.img ... of MIB MiB (made once, shared by every run): sparse,
# or written by `FILLER fill` (mvmm-io: every 8-byte word holds a magic number XOR its offset, which the guest's
# reads check).
bb_disks() {
	_i=0
	while [ "$_i" -lt "$1" ]; do
		_disk=$BB_DIR/disk$_i.img
		if [ -n "${3:-}" ]; then "$3" fill "$_disk" "$2"; else truncate -s "${2}M" "$_disk"; fi || {
			echo "BOOTBENCH-ERROR cannot make $_disk"
			return 1
		}
		_i=$((_i + 1))
	done
}

# bb_delay N MS: puts each of the N disks of bb_disks behind a loop device and a device-mapper delay target,
# /dev/mapper/bb-delay0 ..., that holds every read and write MS ms (a slow disk; the VMMs get these devices).
# Without udev, dmsetup makes only /dev/dm-N (devtmpfs); mknodes adds the /dev/mapper name.
bb_delay() {
	_i=0
	while [ "$_i" -lt "$1" ]; do
		_disk=$BB_DIR/disk$_i.img
		{
			_loop=$(losetup -f) && losetup "$_loop" "$_disk" &&
				dmsetup create "bb-delay$_i" --table "0 $(blockdev --getsz "$_loop") delay $_loop 0 $2" &&
				dmsetup mknodes "bb-delay$_i" && [ -e "$BB_MAPPER/bb-delay$_i" ]
		} || {
			echo "BOOTBENCH-ERROR cannot put $_disk behind dm-delay"
			return 1
		}
		_i=$((_i + 1))
	done
}

# bb_host_io FILLER SECONDS [DEVICE]: the guest's two workloads (4 KiB random reads, 64 KiB sequential ones, depth
# 32) run by the test host itself on the first disk's file, through the page cache as both VMMs read it (its RAM
# file system takes no O_DIRECT), or on DEVICE (the first disk behind dm-delay) with O_DIRECT as both VMMs read that
# (cache=none): what the same reads of the same disk cost outside any guest.
bb_host_io() {
	_mode=buffered
	[ -z "${3:-}" ] || _mode=
	for _w in "randread 4096" "seqread 65536"; do
		# shellcheck disable=SC2086 # the workload and its block size are two words; no mode: O_DIRECT
		_line=$("$1" read "${3:-$BB_DIR/disk0.img}" $_w 32 "$2" $_mode) ||
			echo "BOOTBENCH-ERROR host-side $_w failed"
		echo "BOOTBENCH-HOSTIO $_line"
	done
}

# bb_overlays N MIB FILLER CLUSTER: N qcow2 overlays $BB_DIR/overlay0.qcow2 ... of one qcow2 base
# $BB_DIR/base.qcow2 of MIB MiB with CLUSTER-byte clusters, every cluster allocated and holding `FILLER fill`'s
# pattern (so the guest's reads go through the base's L2 tables and check what they read); the overlays are empty.
bb_overlays() {
	{
		"$3" fill "$BB_DIR/base.raw" "$2" &&
			qemu-img convert -f raw -O qcow2 -o "cluster_size=$4" "$BB_DIR/base.raw" "$BB_DIR/base.qcow2" &&
			rm "$BB_DIR/base.raw"
	} || {
		echo "BOOTBENCH-ERROR cannot make $BB_DIR/base.qcow2"
		return 1
	}
	_i=0
	while [ "$_i" -lt "$1" ]; do
		qemu-img create -q -f qcow2 -b "$BB_DIR/base.qcow2" -F qcow2 "$BB_DIR/overlay$_i.qcow2" || {
			echo "BOOTBENCH-ERROR cannot make $BB_DIR/overlay$_i.qcow2"
			return 1
		}
		_i=$((_i + 1))
	done
}

# bb_hugepages N: reserves N hugepages of the default size (2 MiB) for the runs.
bb_hugepages() {
	echo "$1" >/proc/sys/vm/nr_hugepages
	read -r _have </proc/sys/vm/nr_hugepages
	[ "$_have" -ge "$1" ] || {
		echo "BOOTBENCH-ERROR only $_have of $1 hugepages could be reserved"
		return 1
	}
}

# bb_stamp TAG PIDFILE LOG: reads a VMM's output on stdin; keeps every line in LOG, prints the lines that matter
# as BOOTBENCH-LINE and, at the line $BB_MEM_AT matches, BOOTBENCH-MEM for the process whose id PIDFILE holds (written
# once the VMM started). One awk process: no fork per line.
bb_stamp() {
	awk -v tag="$1" -v pidfile="$2" -v out="$3" -v keep="$BB_KEEP" -v memat="$BB_MEM_AT" -v proc="$BB_PROC" \
		-v perfat="${BB_PERF:+$BB_PERF_AT}" -v perfout="$BB_DIR/$1.perf" '
	function uptime(  line, f) {
		getline line < "/proc/uptime"
		close("/proc/uptime")
		split(line, f, " ")
		return f[1]
	}
	# Whether a hex address is a multiple of 64 MiB (0x4000000), glibc'"'"'s HEAP_MAX_SIZE on 64-bit: as a
	# string, since busybox awk has no 64-bit hex arithmetic.
	function heap_aligned(address,  n) {
		n = length(address)
		return n > 7 && substr(address, n - 5) == "000000" && index("048c", substr(address, n - 6, 1)) > 0
	}
	# glibc'"'"'s arenas beside the main one ([heap]): each is a 64 MiB-aligned reservation of 64 MiB, anonymous,
	# read-write as far as it grew and PROT_NONE (---p) after. Sums their Rss and Size.
	function arenas(count,  i) {
		arena_rss = arena_size = arena_count = 0
		for (i = 1; i <= count; i++) {
			if (!anon[i] || perms[i] != "rw-p" || !heap_aligned(first[i])) continue
			if (msize[i] != 65536 && !(i < count && anon[i + 1] && perms[i + 1] == "---p" &&
					first[i + 1] == last[i] && msize[i] + msize[i + 1] == 65536)) continue
			arena_rss += mrss[i]
			arena_size += msize[i]
			arena_count++
		}
	}
	function mem(  pid, line, f, a, n, m, path, hwm, size, best, bestm, guest, name, heap_rss, heap_size) {
		getline pid < pidfile
		close(pidfile)
		hwm = "n/a"
		path = proc "/" pid "/status"
		while ((getline line < path) > 0)
			if (line ~ /^VmHWM:/) { split(line, f, " "); hwm = f[2] }
		close(path)
		best = -1
		guest = "n/a"
		path = proc "/" pid "/smaps"
		heap_rss = heap_size = m = 0
		while ((getline line < path) > 0) {
			n = split(line, f, " ")
			if (f[1] ~ /^[0-9a-f]+-[0-9a-f]+$/) {
				name = n > 5 ? f[n] : ""
				split(f[1], a, "-")
				m++
				first[m] = a[1]
				last[m] = a[2]
				perms[m] = f[2]
				anon[m] = n == 5 && f[5] == "0"
				msize[m] = mrss[m] = mthp[m] = 0
			} else if (f[1] == "Size:") { size = msize[m] = f[2] + 0; if (name == "[heap]") heap_size += size }
			else if (f[1] == "AnonHugePages:") mthp[m] = f[2] + 0
			else if (f[1] == "Rss:") {
				mrss[m] = f[2] + 0
				if (size > best) { best = size; guest = f[2]; bestm = m }
				if (name == "[heap]") heap_rss += f[2]
			}
		}
		close(path)
		arenas(m)
		print "BOOTBENCH-MEM " tag " hwm_kib=" hwm " guest_kib=" guest " mapping_kib=" best \
			" guest_thp_kib=" (bestm ? mthp[bestm] + 0 : "n/a") \
			" heap_rss_kib=" heap_rss " heap_size_kib=" heap_size " arena_rss_kib=" arena_rss \
			" arena_size_kib=" arena_size " arenas=" arena_count
		fflush()
	}
	# A /proc stat file as "<name with _ for spaces>:<utime + stime>".
	function stat_ticks(path,  line, f, comm) {
		getline line < path
		close(path)
		comm = line
		sub(/^[^(]*\(/, "", comm)
		sub(/\).*$/, "", comm)
		gsub(/ /, "_", comm)
		sub(/^[^)]*\) /, "", line)
		split(line, f, " ")
		return comm ":" (f[12] + f[13])
	}
	function cpu(t, marker,  pid, cmd, tid, all, out) {
		getline pid < pidfile
		close(pidfile)
		all = stat_ticks(proc "/" pid "/stat")
		out = "BOOTBENCH-CPU " tag " " t " " marker " ticks=" substr(all, index(all, ":") + 1)
		cmd = "ls " proc "/" pid "/task"
		while ((cmd | getline tid) > 0) out = out " " tid ":" stat_ticks(proc "/" pid "/task/" tid "/stat")
		close(cmd)
		print out
		fflush()
	}
	# perf record attached to the VMM (bb_perf_report waits for it): from the marker on, every thread is there.
	function perf(  pid) {
		getline pid < pidfile
		close(pidfile)
		system("perf record -q -e cpu-clock -F 499 -p " pid " -o " perfout " >/dev/null 2>&1 & echo $! >" \
			perfout ".pid")
	}
	{
		t = uptime()
		sub(/\r+$/, "")
		if (perfat != "" && !perfed && $0 ~ perfat) { perfed = 1; perf() }
		if (match($0, /MVMM-MARK io(-start)? /)) cpu(t, substr($0, RSTART + 10, RLENGTH - 11))
		print > out
		if ($0 ~ keep) {
			print "BOOTBENCH-LINE " tag " " t " " $0
			fflush()
		}
		if ($0 ~ memat) mem()
	}'
}

# bb_threads TAG PID: a BOOTBENCH-THREAD line per thread of PID.
bb_threads() {
	for _task in /proc/"$2"/task/*; do
		read -r _name <"$_task/comm" || _name="?"
		_state=$(awk '/^State:/ { print $2 }' "$_task/status" 2>/dev/null)
		_wchan=$(cat "$_task/wchan" 2>/dev/null)
		_stack=$(awk '{ printf "%s ", $2 } NR == 6 { exit }' "$_task/stack" 2>/dev/null)
		echo "BOOTBENCH-THREAD $1 ${_task##*/} $_name ${_state:-?} wchan=${_wchan:-?} stack: ${_stack:-?}"
	done
}

# bb_guard TAG PID LIMIT FLAG: after LIMIT s, shows PID's threads, creates FLAG and ends PID (TERM, then KILL 5 s
# later). Stops quietly on SIGTERM (the run ended in time).
bb_guard() {
	trap 'kill "$_sleeper" 2>/dev/null; exit 0' TERM
	sleep "$3" &
	_sleeper=$!
	wait "$_sleeper"
	: >"$4"
	bb_threads "$1" "$2"
	kill -TERM "$2" 2>/dev/null
	sleep 5 &
	_sleeper=$!
	wait "$_sleeper"
	kill -KILL "$2" 2>/dev/null
}

# With BB_PERF set, bb_stamp attaches perf record (cpu-clock at 499 Hz: the test host has no PMU) to the VMM at the
# first line matching $BB_PERF_AT, once its threads exist, until it exits, into $BB_DIR/TAG.perf.
BB_PERF_AT=${BB_PERF_AT:-MVMM-MARK init }
# bb_perf_report TAG: once the VMM exited, its profile as BOOTBENCH-PERF lines: the share of samples per thread name,
# then the top symbols per thread name, dso and symbol.
bb_perf_report() {
	[ -s "$BB_DIR/$1.perf.pid" ] || return 0
	read -r _perf <"$BB_DIR/$1.perf.pid"
	while kill -0 "$_perf" 2>/dev/null; do sleep 0.2; done
	for _sort in comm comm,dso,sym; do
		perf report -i "$BB_DIR/$1.perf" --stdio --no-children --sort "$_sort" 2>/dev/null | grep -v '^#' |
			grep -v '^$' | head -n 50 | while IFS= read -r _line; do echo "BOOTBENCH-PERF $1 $_line"; done
	done
	rm -f "$BB_DIR/$1.perf" "$BB_DIR/$1.perf.pid"
}

# bb_run TAG LIMIT COMMAND...: runs the VMM COMMAND (stdin /dev/null, stdout and stderr to bb_stamp through a
# FIFO), at most LIMIT s, and prints BEGIN/LINE/MEM/END (and TAIL when it failed or hung).
bb_run() {
	_tag=$1 _limit=$2
	shift 2
	_fifo=$BB_DIR/$_tag.fifo _log=$BB_DIR/$_tag.log _flag=$BB_DIR/$_tag.hung _pidfile=$BB_DIR/$_tag.pid
	rm -f "$_fifo" "$_flag" "$_pidfile"
	: >"$_log"
	mkfifo "$_fifo" || {
		echo "BOOTBENCH-ERROR cannot make $_fifo"
		return 1
	}
	# The reader first: the VMM's open of the FIFO then does not wait for awk to start.
	bb_stamp "$_tag" "$_pidfile" "$_log" <"$_fifo" &
	_stamper=$!
	read -r _t0 _ </proc/uptime
	echo "BOOTBENCH-BEGIN $_tag $_t0"
	"$@" </dev/null >"$_fifo" 2>&1 &
	_pid=$!
	echo "$_pid" >"$_pidfile"
	bb_guard "$_tag" "$_pid" "$_limit" "$_flag" &
	_guard=$!
	wait "$_pid"
	_code=$?
	read -r _t1 _ </proc/uptime
	kill -TERM "$_guard" 2>/dev/null
	wait "$_stamper"
	[ -z "${BB_PERF:-}" ] || bb_perf_report "$_tag"
	_hung=0
	[ -e "$_flag" ] && _hung=1
	echo "BOOTBENCH-END $_tag $_t1 $_code $_hung"
	if [ "$_code" != 0 ] || [ "$_hung" = 1 ]; then
		tail -n 40 "$_log" | while IFS= read -r _line; do echo "BOOTBENCH-TAIL $_tag $_line"; done
	fi
	_report=$BB_DIR/$_tag.report.json
	[ -s "$_report" ] && echo "BOOTBENCH-REPORT $_tag $(tr -d '\n' <"$_report")"
	rm -f "$_fifo" "$_log" "$_flag" "$_pidfile" "$_report"
}
