#!/usr/bin/env bash
# Fails when code comments or documents cite a specification that is not in this repository
# ("spec 3.8 step 3", "§9.2", "(3.4)", "quirk Q5", "conformance 14", "statement 12 of the spec").
# Behaviour is cited from docs/behaviour.md and the provider documents instead, by statement id
# (`docs/behaviour.md SD-74`, `docs/clusterapi.md CAPI-38`); see the top of docs/behaviour.md.
#
# Source files are checked in their comments only (after `//` or `#`), so code and string
# literals such as `spec:` or `NodeGroupSpec` never match; Markdown files are checked whole.
# Prints file:line: text for every hit and exits 1 when there is any.
#
# Usage: scripts/check-citations.sh [PATH...]   (default: crates docs README.md ARCHITECTURE.md)
set -euo pipefail
cd "$(dirname "$0")/.."

paths=("$@")
if [ ${#paths[@]} -eq 0 ]; then
    paths=(crates docs README.md ARCHITECTURE.md)
fi

# Citation forms of the external specification. Each alternative is anchored on wording that
# legitimate text does not use (checked against the whole tree when this script was written).
pattern='([Ss]pec(ification)? §?[0-9]|§ ?[0-9]|[Ss]pec (section|quirk|conformance|`[a-z-]+\.md`)'
pattern+='|(core|upstream|upstream.s) spec\b|(rules?|statements?|sections?|checklist|vectors?) of the spec\b'
pattern+='|the spec.s (order|table|vectors?)|shared/spec|spec/[a-z-]+\.md|[Ss]ection [0-9]+(\.[0-9]+)* of the'
pattern+='|[Qq]uirks? Q[0-9]|\(Q[0-9]+[),]|[Cc]onformance (statement )?[0-9]|[Ss]tatements? [0-9]+( (to|and)|[–-][0-9])'
pattern+='|[Ss]tatements? [0-9]+ of|\b[Ss]tep [0-9]+ of [0-9]|\b[0-9]+\.[0-9]+ steps? [0-9]'
pattern+='|\((([1-9][0-9]?\.[0-9]+|§[0-9.]+)(, |–| and ))*[1-9][0-9]?\.[0-9]{1,2}( steps? [0-9][0-9.–-]*)?[),]'
pattern+='|^ *(///?!?|#) *[0-9]\.[0-9]+(,| step| \(|:) )'

status=0
while IFS= read -r -d '' file; do
    case "$file" in
    *.md)
        hits=$(grep -nE "$pattern" "$file" || true)
        ;;
    *.rs | *.proto)
        # The comment part of each line: from the first `//` that is not inside a string on
        # simple lines; good enough because citations live in comments and doc comments.
        hits=$(awk '{ i = index($0, "//"); if (i > 0) printf "%d:%s\n", NR, substr($0, i) }' "$file" |
            grep -E "^[0-9]+:.*($pattern)" || true)
        ;;
    *.toml | *.yaml | *.yml | *.sh)
        hits=$(awk '{ i = index($0, "#"); if (i > 0) printf "%d:%s\n", NR, substr($0, i) }' "$file" |
            grep -E "^[0-9]+:.*($pattern)" || true)
        ;;
    *)
        continue
        ;;
    esac
    if [ -n "$hits" ]; then
        status=1
        while IFS= read -r hit; do
            printf '%s:%s\n' "$file" "$hit"
        done <<<"$hits"
    fi
done < <(find "${paths[@]}" -type f \( -name '*.rs' -o -name '*.proto' -o -name '*.md' \
    -o -name '*.toml' -o -name '*.yaml' -o -name '*.yml' -o -name '*.sh' \) \
    -not -path '*/target/*' -print0 | sort -z)

if [ "$status" -ne 0 ]; then
    echo "check-citations: the lines above cite a specification outside the repository;" >&2
    echo "cite docs/behaviour.md or a provider document by statement id instead." >&2
fi
exit "$status"
