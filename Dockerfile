# The ccdiff runner with every stack built natively inside (issue 8 splits
# this into one image per stack).  FROM resolves to Debian's image, or to the
# offline-made base image tagged the same way.
FROM debian:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends \
        python3 python3-pip python3-venv gcc make cargo ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /ccdiff
COPY . .
RUN python3 -m venv /venv && /venv/bin/pip install --quiet . && /venv/bin/ccdiff build all
ENV PATH=/venv/bin:$PATH CCDIFF_HOME=/ccdiff
USER nobody
