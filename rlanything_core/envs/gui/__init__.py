"""Web apps in headless Chromium: the apps (`apps`), their tasks (`tasks`), the browser
(`browser`), warm-start demonstrations (`demos`) and its `Environment` (`environment`)."""
