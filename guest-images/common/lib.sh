# Shell helpers shared by the guest's and the test host's /init and by the guest's test scripts.
# Installed at /lib/mvmm/lib.sh; sourced, never run.

# mark NAME [key=value ...]: one machine-readable line on the console:
#   MVMM-MARK <name> <seconds since boot> [key=value ...]
mark() {
	_name=$1
	shift
	read -r _up _ </proc/uptime
	echo "MVMM-MARK $_name $_up${*:+ $*}"
}

# param NAME: prints the value of NAME=VALUE on the kernel command line; fails when it is absent.
param() {
	for _w in $(cat /proc/cmdline); do
		case $_w in "$1="*)
			echo "${_w#*=}"
			return 0
			;;
		esac
	done
	return 1
}

mount_basics() {
	mount -t proc proc /proc
	mount -t sysfs sysfs /sys
	mount -t devtmpfs devtmpfs /dev
}

# load_modules [COMMAND]: insmods the modules listed in /lib/modules/load-order (dependency order, made at build
# time from depmod's modules.dep), with their parameters; runs COMMAND NAME after each one.
load_modules() {
	while read -r _file _params; do
		# shellcheck disable=SC2086 # parameters are separate words
		if ! insmod "/lib/modules/$_file" $_params; then
			echo "mvmm: insmod $_file failed" >&2
			return 1
		fi
		[ -z "${1:-}" ] || "$1" "${_file%.ko}"
	done </lib/modules/load-order
}

# disks: the names of the block devices the kernel sees (vda, sda, ...), without loop and RAM disks.
disks() {
	for _d in /sys/block/*; do
		[ -e "$_d" ] || continue
		case ${_d##*/} in loop* | ram* | zram*) ;; *) echo "${_d##*/}" ;; esac
	done
}
