#!/bin/bash
sed -i -e 's/^debug = true$/debug = false/' -e 's/^port = 8080$/port = 9090/' /app/service.ini
