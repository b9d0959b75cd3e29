#!/bin/bash
echo 35 > /app/answer.txt
