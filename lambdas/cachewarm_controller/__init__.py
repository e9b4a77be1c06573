"""cachewarm's controller: the plain, typed steps behind the Step Functions Task states.

`handlers.py` adapts them to Lambda (Powertools); everything else takes boto3 clients (or small
interfaces over them) as arguments, so it runs and is tested without AWS.
"""
