#!/bin/bash
echo 15 > /app/answer.txt
