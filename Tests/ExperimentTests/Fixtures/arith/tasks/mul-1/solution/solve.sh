#!/bin/bash
echo 275 > /app/answer.txt
