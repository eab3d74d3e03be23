#!/bin/bash
# Harbor's verifier contract: write the reward to /logs/verifier/reward.txt (task.toml runs this as nobody)
[ "$(id -un)" = "nobody" ] || { echo "ran as $(id -un)"; exit 1; }
sum=$(cat /app/out/sum.txt 2>/dev/null)
max=$(cat /app/out/max.txt 2>/dev/null)
if [ "$sum" = "75" ] && [ "$max" = "40" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "sum: '$sum', max: '$max'"
  echo 0 > /logs/verifier/reward.txt
fi
