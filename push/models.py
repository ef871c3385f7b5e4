# Push configs, signing keys and the delivery log arrive with push delivery; until then every
# push method answers PushNotificationNotSupported and cards say pushNotifications: false.
