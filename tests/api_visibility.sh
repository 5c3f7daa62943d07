#!/usr/bin/env bash
# api_visibility.sh: the library archive exports exactly the SP_API functions of
# include/specula.h: every defined global function with default visibility is declared
# SP_API, and every SP_API function is defined. usage: api_visibility.sh LIB HEADER
set -eu
LIB=$1 HDR=$2
exported=$(readelf -sW "$LIB" | awk '$4 == "FUNC" && $5 == "GLOBAL" && $6 == "DEFAULT" && $7 != "UND" {print $8}' | sort -u)
declared=$(grep -oE '^SP_API [^(]*\bsp_[a-z0-9_]+\(' "$HDR" | grep -oE 'sp_[a-z0-9_]+\($' | tr -d '(' | sort -u)
extra=$(comm -23 <(echo "$exported") <(echo "$declared"))
missing=$(comm -13 <(echo "$exported") <(echo "$declared"))
hidden=$(readelf -sW "$LIB" | awk '$4 == "FUNC" && $5 == "GLOBAL" && $6 == "HIDDEN" && $7 != "UND"' | wc -l)
echo "api_visibility: $(echo "$exported" | wc -l) exported, $(echo "$declared" | wc -l) declared SP_API, $hidden hidden"
if [ -n "$extra" ]; then echo "exported but not SP_API in $HDR:"; echo "$extra"; exit 1; fi
if [ -n "$missing" ]; then echo "SP_API but not defined in $LIB:"; echo "$missing"; exit 1; fi
