"""The backend conformance suite, shipped with core so every backend passes the same tests.

Run it against an installed device::

    pytest --pyargs fusegrad.testing --fusegrad-device=MYDEV

Every result is compared with the PYTHON device (the oracle). Cases the device's renderer does
not declare (a dtype it cannot hold, local memory) are skipped, and the skips are listed, with
their reasons, at the end of the run. Without ``--fusegrad-device`` the suite is inert: the pytest
plugin (``fusegrad.testing.plugin``, registered through the ``pytest11`` entry point) only adds
the option, and these tests skip.
"""
