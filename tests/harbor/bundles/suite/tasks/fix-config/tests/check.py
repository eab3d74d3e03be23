import configparser
import json

config = configparser.ConfigParser()
config.read("/app/service.ini")
service = config["service"] if config.has_section("service") else {}
checks = [service.get("debug") == "false", service.get("port") == "9090", service.get("name") == "ledger"]
print(json.dumps({"reward": 1.0 if all(checks) else 0.0}))
