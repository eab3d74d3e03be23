import sys

numbers = [int(line) for line in sys.stdin if line.strip()]
print(sum(numbers) if sys.argv[1] == "sum" else max(numbers))
