# Range checks for the numeric variables of the shell scripts (ablations/, peer/, bench/), sourced
# by each of them:
#   need_int TOOL NAME MIN MAX
# exits 2 with a message naming NAME unless $NAME is a whole decimal number from MIN to MAX, so
# that a 0 that would make a loop spin, or a huge count that would never end, is refused at once.
# The value is written back without leading zeros (bash arithmetic would read 010 as octal 8).
need_int() {
  local tool=$1 name=$2 min=$3 max=$4
  local v=${!name-}
  case "$v" in
    '' | *[!0-9]*) echo "$tool: $name must be a whole number from $min to $max, got '$v'" >&2; exit 2 ;;
  esac
  local n=${v#"${v%%[!0]*}"}
  n=${n:-0}
  if [ ${#n} -gt 15 ] || [ "$n" -lt "$min" ] || [ "$n" -gt "$max" ]; then
    echo "$tool: $name must be a whole number from $min to $max, got '$v'" >&2
    exit 2
  fi
  printf -v "$name" '%s' "$n"
}
